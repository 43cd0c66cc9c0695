"""Written for ParallelKernelBench: builds its extension with the benchmark's helper. The source
is plain C++, so with a CPU build of torch the shim builds it as a C++ extension."""
import torch
import torch.distributed as dist
from utils.cuda_helpers import compile_cuda_extension

SOURCE = r"""
#include <torch/extension.h>

torch::Tensor widen(torch::Tensor x) { return x.to(torch::kFloat32); }

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("widen", &widen, "cast to fp32"); }
"""

ext = compile_cuda_extension("pkb_widen", SOURCE, extra_cuda_cflags=["-O3", "--use_fast_math"])


@torch.no_grad()
def solution(tensor):
    total = ext.widen(tensor)
    dist.all_reduce(total)
    return total.to(tensor.dtype)
