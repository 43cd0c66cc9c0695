"""A small folder laid out like a ParallelKernelBench checkout, written for the tests in this
project's own words: a few reference programs, an input generator with the benchmark's
signature and seeding style, a helper module candidates must never reach, and a launcher whose
argparse defaults the loader reads. :func:`make_checkout` writes it under a folder."""

from pathlib import Path

HERE = Path(__file__).parent
FILES = {
    "run_local.py": "run_local.txt",
    "utils/__init__.py": None,
    "utils/input_output_tensors.py": "input_output_tensors.txt",
    "utils/cuda_helpers.py": "cuda_helpers.txt",
    "reference/1_allreduce.py": "ref_1_allreduce.txt",
    "reference/7_reducescatter.py": "ref_7_reducescatter.txt",
    "reference/21_grad_norm_clip.py": "ref_21_grad_norm_clip.txt",
    "reference/31_linear_allreduce.py": "ref_31_linear_allreduce.txt",
    "reference/55_pair_sum.py": "ref_55_pair_sum.txt",
}

BASE_SHAPE = (96, 40)  # the launcher's --m and --n defaults below


def make_checkout(folder: Path) -> Path:
    root = folder / "ParallelKernelBench"
    for target, template in FILES.items():
        path = root / target
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text((HERE / template).read_text() if template else "")
    return root
