"""ParallelKernelBench (PKB) problems, loaded at run time from the user's own checkout.

Nothing of PKB lives in this project. Given the root of a checkout (``--pkb-root`` or
``$KLOOP_PKB_ROOT``), a problem is made of
- its reference file ``reference/<id>_<name>.py``, defining ``solution(*inputs)``;
- inputs from the checkout's ``utils/input_output_tensors.py``: ``create_input_tensor(rank,
  world_size, problem_id, base_shape, dtype, trial=0, device=None)``, which seeds torch's global
  RNG itself from the problem id, the rank and the trial; the trial index here is derived from
  the harness's (secret-mixed) trial seed, so inputs change from trial to trial;
- the defaults of its ``run_local.py`` (base shape ``--m``/``--n``, ``--dtype``, ``--atol``,
  ``--rtol``), read from its argparse calls without running the file.

``pkb:1``, ``pkb:1_allreduce`` and ``pkb:allreduce`` name the same problem (a bare number takes
the first file with that prefix, as PKB's own resolver does). ``Problem.ref`` is
``pkb:<root>::<stem>``; rank processes load it again through ``problems.registry.load_ref``.

The generator is imported under a private module name, without the checkout on ``sys.path``:
candidate ranks import it before they are confined and never see the checkout; candidates
written for PKB get the harness's own ``utils.cuda_helpers`` instead (``Problem.compat``).
"""

from __future__ import annotations

import ast
import difflib
import hashlib
import importlib.util
import os
import re
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from types import ModuleType

import structlog

from problems.contract import DTYPES, Cost, Problem, ProblemSpec, UnknownProblem

log = structlog.get_logger(__name__)

PREFIX = "pkb:"
ROOT_ENV = "KLOOP_PKB_ROOT"
GENERATOR = "utils/input_output_tensors.py"
LAUNCHER = "run_local.py"
WORLD_SIZES = (2, 4, 8)  # PKB runs on up to 8 GPUs; its generators assume even splits
TRIALS = 2**31  # the PKB trial index is the harness's trial seed modulo this
COLLECTIVE_NAMES = frozenset({"allreduce", "allgather", "broadcast", "reduce", "scatter", "gather", "reducescatter", "alltoall"})
_STEM = re.compile(r"^(\d+)_(\w+)$")


@dataclass(frozen=True)
class Defaults:
    """What PKB's run_local.py uses unless told otherwise; these values stand in where the
    checkout's own file cannot be read."""

    base_shape: tuple[int, int] = (1024, 1024)
    dtype: str = "bfloat16"
    atol: float = 1e-2
    rtol: float = 1e-2


class PkbError(UnknownProblem):
    """No checkout, not a checkout, or no such problem in it; the message is one line."""


def checkout_root(root: str | os.PathLike | None = None) -> Path:
    """The checkout at ``root``, else at ``$KLOOP_PKB_ROOT``, checked to look like PKB."""
    given = root if root not in (None, "") else os.environ.get(ROOT_ENV)
    if not given:
        raise PkbError(f"ParallelKernelBench problems need a checkout: pass --pkb-root PATH or set {ROOT_ENV}")
    path = Path(given).expanduser()
    if not path.is_dir():
        raise PkbError(f"ParallelKernelBench root {path} {'is not a folder' if path.exists() else 'does not exist'}")
    path = path.resolve()
    missing = [part for part in ("reference/", GENERATOR) if not (path / part).exists()]
    if missing:
        raise PkbError(f"{path} is not a ParallelKernelBench checkout: it has no {' and no '.join(missing)}")
    if not problem_stems(path):
        raise PkbError(f"{path} is not a ParallelKernelBench checkout: reference/ holds no <id>_<name>.py file")
    return path


def problem_stems(root: Path) -> list[str]:
    """``["1_allreduce", "2_allgather", ...]``, by id then name."""
    stems = [path.stem for path in (root / "reference").glob("*.py") if _STEM.match(path.stem)]
    return sorted(stems, key=lambda stem: (int(_STEM.match(stem).group(1)), stem))


def resolve_stem(root: Path, ident: str) -> str:
    """``1``, ``1_allreduce``, ``1_allreduce.py`` or ``allreduce`` -> ``1_allreduce``."""
    raw = ident.strip().removeprefix(PREFIX).strip().removesuffix(".py")
    stems = problem_stems(root)
    if raw.isdigit():
        matches = [stem for stem in stems if _STEM.match(stem).group(1) == raw]
        if len(matches) > 1:
            log.warning("several ParallelKernelBench problems share this id; taking the first, as PKB does", id=raw, stems=matches)
        if matches:
            return matches[0]
    else:
        exact = [stem for stem in stems if stem.lower() == raw.lower()]
        if exact:
            return exact[0]
        by_name = [stem for stem in stems if _STEM.match(stem).group(2).lower() == raw.lower()]
        if len(by_name) == 1:
            return by_name[0]
        if by_name:
            raise PkbError(f"{raw!r} names several ParallelKernelBench problems in {root}: {', '.join(by_name)}; give the id")
    names = {stem: stem for stem in stems} | {_STEM.match(stem).group(2): stem for stem in stems}
    close = list(dict.fromkeys(names[match] for match in difflib.get_close_matches(raw, list(names), n=4, cutoff=0.5)))
    hint = f"did you mean {', '.join(close)}?" if close else f"it has {len(stems)} problems, {stems[0]} to {stems[-1]}"
    raise PkbError(f"no ParallelKernelBench problem {raw!r} in {root}; {hint}")


def read_defaults(root: Path) -> Defaults:
    """The argparse defaults of the checkout's run_local.py (read from its syntax tree, not run)."""
    fallback = Defaults()
    path = root / LAUNCHER
    try:
        tree = ast.parse(path.read_text(), filename=str(path))
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError) as error:
        log.warning("cannot read the defaults of run_local.py; using PKB's usual ones", path=str(path), error=str(error))
        return fallback
    found: dict[str, object] = {}
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_argument"):
            continue
        default = next((keyword.value for keyword in node.keywords if keyword.arg == "default"), None)
        try:
            value = ast.literal_eval(default) if default is not None else None
        except ValueError:
            continue
        for flag in node.args:
            if isinstance(flag, ast.Constant) and isinstance(flag.value, str) and value is not None:
                found.setdefault(flag.value, value)

    def number(flag: str, kind: type, usual):
        value = found.get(flag)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
            return kind(value)
        return usual

    dtype = found.get("--dtype")
    return Defaults(
        base_shape=(number("--m", int, fallback.base_shape[0]), number("--n", int, fallback.base_shape[1])),
        dtype=dtype if dtype in DTYPES else fallback.dtype,
        atol=number("--atol", float, fallback.atol), rtol=number("--rtol", float, fallback.rtol),
    )


@cache
def _generator_module(path: Path) -> ModuleType:
    """The checkout's input generator, under a private name: a candidate's ``import utils``
    must never find the checkout's package in ``sys.modules``."""
    name = f"kloop_pkb_inputs_{hashlib.sha256(str(path).encode()).hexdigest()[:12]}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and pickling look modules up by name
    try:
        spec.loader.exec_module(module)
    except Exception as error:  # noqa: BLE001 - any import failure is the checkout's, said in one line
        del sys.modules[name]
        raise PkbError(f"cannot import {path}: {type(error).__name__}: {error}") from None
    if not callable(getattr(module, "create_input_tensor", None)):
        raise PkbError(f"{path} defines no create_input_tensor(rank, world_size, problem_id, base_shape, dtype, trial, device)")
    return module


class PkbInputs:
    """``make_inputs`` of one PKB problem: the checkout's ``create_input_tensor`` with a trial
    index derived from the harness's trial seed. The generator (it imports torch: seconds) is
    imported at the first call, in the process that makes inputs, never where a problem is only
    listed or handed on (the CLI, the batch controller)."""

    def __init__(self, generator_path: Path, problem_id: int):
        self.generator_path = generator_path
        self.problem_id = problem_id

    def __call__(self, rank, world, generator, device, dtype, *, base_shape) -> tuple:
        create = _generator_module(self.generator_path).create_input_tensor
        trial = generator.initial_seed() % TRIALS
        inputs = create(rank, world, self.problem_id, tuple(base_shape), dtype, trial=trial, device=device)
        return tuple(inputs) if isinstance(inputs, (tuple, list)) else (inputs,)


def _check_generator(path: Path) -> None:
    """PkbError unless ``path`` parses and defines ``create_input_tensor`` at its top level: read,
    not imported (importing it imports torch)."""
    try:
        tree = ast.parse(path.read_text(), filename=str(path))
    except (OSError, SyntaxError, ValueError) as error:
        raise PkbError(f"cannot read {path}: {type(error).__name__}: {error}") from None
    if not any(isinstance(node, ast.FunctionDef) and node.name == "create_input_tensor" for node in tree.body):
        raise PkbError(f"{path} defines no create_input_tensor(rank, world_size, problem_id, base_shape, dtype, trial, device)")


def unknown_cost(world, dtype_bytes, **shape) -> Cost:
    """PKB says nothing of what a problem must move or compute: zeros (no roofline)."""
    return Cost()


def spec_name(stem: str) -> str:
    return "pkb_" + re.sub(r"[^0-9a-z]+", "_", stem.lower()).strip("_")


def _spec(stem: str, defaults: Defaults) -> ProblemSpec:
    problem_id, short = _STEM.match(stem).groups()
    # PKB's generator groups ids 1-8 as its collectives; beyond them its ids say nothing reliable.
    collective = 1 <= int(problem_id) <= 8 and short.lower() in COLLECTIVE_NAMES
    shape = {"base_shape": defaults.base_shape}
    return ProblemSpec(
        name=spec_name(stem), category="collective" if collective else "uncategorized", pattern=short.replace("_", " "),
        origin=f"ParallelKernelBench problem {problem_id} (reference/{stem}.py)", world_sizes=WORLD_SIZES,
        dtype=defaults.dtype, atol=defaults.atol, rtol=defaults.rtol, shapes={"default": shape, "small": shape},
        description=(f"ParallelKernelBench problem {problem_id} ({short}). Its inputs come from the benchmark's "
                     f"create_input_tensor with base_shape (M, N) = {defaults.base_shape}."),
    )


@cache
def _load(root: Path, stem: str) -> Problem:
    reference = root / "reference" / f"{stem}.py"
    if not _STEM.match(stem) or not reference.is_file():
        raise PkbError(f"no ParallelKernelBench reference {reference}")
    generator_path = root / GENERATOR
    _check_generator(generator_path)
    return Problem(
        spec=_spec(stem, read_defaults(root)), folder=root, make_inputs=PkbInputs(generator_path, int(_STEM.match(stem).group(1))),
        cost=unknown_cost, ref=f"{PREFIX}{root}::{stem}", reference_file=reference, source_files=(reference, generator_path),
        reference_sys_path=(root,), compat="pkb",
    )


def load_pkb_problem(ident: str, root: str | os.PathLike | None = None) -> Problem:
    """The PKB problem ``ident`` (``pkb:`` prefix optional) of the checkout at ``root`` (default
    ``$KLOOP_PKB_ROOT``). Raises :class:`PkbError` with a one-line message."""
    checkout = checkout_root(root)
    return _load(checkout, resolve_stem(checkout, ident))


def load_pkb_ref(location: str) -> Problem:
    """The problem of a ``Problem.ref`` ``pkb:<root>::<stem>`` (``location`` is after ``pkb:``)."""
    root, separator, stem = location.rpartition("::")
    if not separator:
        raise PkbError(f"malformed ParallelKernelBench reference {PREFIX}{location!r}: expected pkb:<root>::<stem>")
    return _load(Path(root), stem)


def pkb_problems(root: str | os.PathLike | None = None) -> list[Problem]:
    checkout = checkout_root(root)
    return [_load(checkout, stem) for stem in problem_stems(checkout)]
