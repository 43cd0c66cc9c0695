"""One-shot all-reduce over symmetric memory with a raw CUDA kernel.

Each block copies its slice of the input into this rank's symmetric buffer, meets the same
block of every other rank at a flag barrier, sums the slice over all ranks' buffers in fp32,
and meets them again before returning so no rank overwrites its buffer while a peer still
reads it. Flags carry a per-call epoch, so they are never reset.
"""

import torch
import torch.distributed as dist

from sandbox import runtime

TRAILING_BARRIER = True
BLOCKS, THREADS = 128, 512

SOURCE = r"""
#include <cuda_bf16.h>
#include <stdint.h>

__device__ __forceinline__ void put_flag(uint32_t* addr, uint32_t value) {
    asm volatile("st.release.sys.global.u32 [%0], %1;" :: "l"(addr), "r"(value) : "memory");
}

__device__ __forceinline__ uint32_t get_flag(const uint32_t* addr) {
    uint32_t value;
    asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(value) : "l"(addr) : "memory");
    return value;
}

// Block b of every rank meets here: thread p tells rank p "I arrived" and waits until rank p says the same.
__device__ void block_barrier(const uint64_t* flag_ptrs, int rank, int world, uint32_t epoch, int slot) {
    __syncthreads();
    if (threadIdx.x < world) {
        __threadfence_system();
        put_flag((uint32_t*)flag_ptrs[threadIdx.x] + slot * world + rank, epoch);
        const uint32_t* mine = (const uint32_t*)flag_ptrs[rank] + slot * world + threadIdx.x;
        while (get_flag(mine) < epoch) {}
    }
    __syncthreads();
}

extern "C" __global__ void one_shot_all_reduce(
    const __nv_bfloat16* __restrict__ input, __nv_bfloat16* __restrict__ out, const uint64_t* __restrict__ buffer_ptrs,
    const uint64_t* __restrict__ flag_ptrs, int rank, int world, long long n, unsigned int epoch, int trailing_barrier)
{
    long long per_block = (n + gridDim.x - 1) / gridDim.x;
    long long begin = (long long)blockIdx.x * per_block;
    long long end = begin + per_block < n ? begin + per_block : n;
    __nv_bfloat16* mine = (__nv_bfloat16*)buffer_ptrs[rank];
    for (long long i = begin + threadIdx.x; i < end; i += blockDim.x) mine[i] = input[i];
    block_barrier(flag_ptrs, rank, world, epoch, blockIdx.x);
    for (long long i = begin + threadIdx.x; i < end; i += blockDim.x) {
        float sum = 0.f;
        for (int peer = 0; peer < world; ++peer) sum += __bfloat162float(((const __nv_bfloat16*)buffer_ptrs[peer])[i]);
        out[i] = __float2bfloat16(sum);
    }
    if (trailing_barrier) block_barrier(flag_ptrs, rank, world, epoch, gridDim.x + blockIdx.x);
}
"""

_state = {}


@torch.no_grad()
def solution(tensor: torch.Tensor) -> torch.Tensor:
    key = (tensor.numel(), tensor.device)
    if key not in _state:
        world = dist.get_world_size()
        buffer = runtime.SymmetricBuffer(tensor.numel(), tensor.dtype, tensor.device)
        flags = runtime.SymmetricBuffer(2 * BLOCKS * world, torch.int32, tensor.device)
        flags.local.zero_()
        torch.cuda.synchronize()
        dist.barrier()  # every rank's flags are zero before anyone signals
        _state[key] = {"buffer": buffer, "flags": flags, "epoch": 0,
                       "kernel": runtime.load_kernel(SOURCE, "one_shot_all_reduce")}
    state = _state[key]
    state["epoch"] += 1
    out = torch.empty_like(tensor)
    buffer, flags = state["buffer"], state["flags"]
    state["kernel"]((BLOCKS,), (THREADS,), (tensor, out, buffer.peer_ptrs, flags.peer_ptrs, buffer.rank, buffer.world,
                                            tensor.numel(), state["epoch"], int(TRAILING_BARRIER)))
    return out
