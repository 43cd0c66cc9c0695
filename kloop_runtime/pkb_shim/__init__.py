"""Import shims for candidates written for ParallelKernelBench (PKB).

PKB solutions do ``from utils.cuda_helpers import compile_cuda_extension``. For PKB problems
(``Problem.compat == "pkb"``) the harness puts :data:`ROOT` on a candidate rank's ``sys.path``
(right after the candidate's own folder, after confinement), so that import finds
``ROOT/utils/cuda_helpers.py``, which builds through ``kloop_runtime.load_extension``: the
trusted parent compiles, the build is cached by content hash, and ranks never compile the
same source twice. The user's PKB checkout itself is never on a candidate's path.
"""

from pathlib import Path

ROOT = Path(__file__).resolve().parent
