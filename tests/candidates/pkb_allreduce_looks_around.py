"""Correct for ParallelKernelBench problem 1, after checking where it stands: its `utils` is the
harness's shim, not the checkout's, and the checkout cannot be read."""
import os

import torch
import torch.distributed as dist
import utils.cuda_helpers

CHECKOUT_FILE = "CHECKOUT_FILE_PLACEHOLDER"

assert "pkb_shim" in utils.cuda_helpers.__file__, utils.cuda_helpers.__file__
try:
    import utils.input_output_tensors  # noqa: F401 - only the checkout has it
except ImportError:
    pass
else:
    raise AssertionError("the checkout's utils package is importable")
try:
    open(CHECKOUT_FILE).read()
except (PermissionError, FileNotFoundError):  # hidden, or outside the jail's view (its own /tmp)
    pass
else:
    raise AssertionError(f"{CHECKOUT_FILE} is readable from a candidate rank")
assert os.environ["WORLD_SIZE"] == str(dist.get_world_size()) and os.environ["RANK"] == str(dist.get_rank())


@torch.no_grad()
def solution(tensor):
    total = tensor.float()
    dist.all_reduce(total)
    return total.to(tensor.dtype)
