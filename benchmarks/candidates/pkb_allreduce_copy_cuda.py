"""A ParallelKernelBench-style solution of problem 1 (all-reduce) for one rank: at world 1 the
all-reduce is a copy, done by a CUDA kernel built with the benchmark's ``compile_cuda_extension``.
Used by benchmarks/vs_pkb.py to time ParallelKernelBench's own harness against kloop on the same
file (``--nproc-per-node 1`` / ``--world 1``); it is not an all-reduce for more ranks."""
import torch
from utils.cuda_helpers import compile_cuda_extension

CUDA_SRC = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>
#include <ATen/cuda/CUDAContext.h>

__global__ void copy_kernel(const uint4* __restrict__ src, uint4* __restrict__ dst, size_t n16) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n16; i += (size_t)gridDim.x * blockDim.x) {
        dst[i] = src[i];
    }
}

__global__ void copy_tail(const unsigned char* __restrict__ src, unsigned char* __restrict__ dst, size_t start, size_t n) {
    size_t i = start + blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < n) dst[i] = src[i];
}

torch::Tensor copy_out(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda(), "x must be a CUDA tensor");
    auto src = x.contiguous();
    auto out = torch::empty_like(src);
    size_t bytes = src.numel() * src.element_size();
    size_t n16 = bytes / 16;
    auto stream = at::cuda::getCurrentCUDAStream();
    if (n16) {
        int blocks = (int)std::min<size_t>((n16 + 255) / 256, 4096);
        copy_kernel<<<blocks, 256, 0, stream>>>((const uint4*)src.data_ptr(), (uint4*)out.data_ptr(), n16);
    }
    size_t done = n16 * 16;
    if (done < bytes) {
        copy_tail<<<1, 256, 0, stream>>>((const unsigned char*)src.data_ptr(), (unsigned char*)out.data_ptr(), done, bytes);
    }
    return out;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("copy_out", &copy_out, "copy a tensor with a CUDA kernel"); }
"""

_ext = compile_cuda_extension("pkb_allreduce_copy", CUDA_SRC, extra_cuda_cflags=["-O3"])


@torch.no_grad()
def solution(tensor: torch.Tensor) -> torch.Tensor:
    return _ext.copy_out(tensor)
