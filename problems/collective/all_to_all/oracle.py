"""All-to-all by push with flags: rank r stores its row block j straight into rank j's receive buffer.

Mechanism. Every rank owns a symmetric receive buffer of ``world`` slots (slot ``s``: the block
rank ``s`` addressed to it), each the size of one row block. One kernel does the whole exchange:
block ``b`` of rank ``r`` takes column ``b`` (a contiguous range of vectors of 16, 8, 4, 2 or 1
bytes, the widest that divides a row block) of each of its W row blocks, stores block ``j``'s
column into slot ``r`` of rank ``j``'s buffer (NVLink stores) and its own block ``r`` directly
into its output, then raises a per-peer flag "column ``b`` of what I addressed to you is in your
buffer". It waits for the W-1 flags of column ``b`` addressed to it, copies column ``b`` of
every peer's slot into the output (a fresh tensor), and meets the other ranks' block ``b`` at a
trailing barrier.

Synchronisation. Flags are uint32 words in a second symmetric buffer, zeroed once (then a host
barrier). Word ``[b][s]`` of rank ``r``'s flags has a single writer, block ``b`` of rank ``s``,
which stores the call number ``epoch`` with a system-scope release after ``__syncthreads`` and
``__threadfence_system`` (the block's pushes are visible before the flag); the receiver spins
with system-scope acquire loads until the word reaches ``epoch``. Epochs only grow, so flags
are never reset. The trailing barrier (same protocol, second set of words) keeps a fast rank
from pushing call ``e+1``'s blocks into a slot its owner is still copying out for call ``e``;
``TRAILING_BARRIER = False`` removes it, and the harness sees outputs that mix two calls.

When it wins. Every pair of ranks exchanges its block at once, each directly from the source
rows to the destination's buffer: one flag round trip plus (W-1)/W of the tensor over NVSwitch,
no staging copy at the source and no per-peer kernel launches or rendezvous as in a send/recv
implementation. The same structure, with the counts of a token dispatch instead of equal
splits, is how expert-parallel dispatch/combine kernels are written.
"""

import torch
import torch.distributed as dist

from sandbox import runtime

TRAILING_BARRIER = True
THREADS = 512
MAX_WORLD = 8
WIDTHS = {16: "16", 8: "8", 4: "4", 2: "2", 1: "1"}  # bytes per vector -> kernel suffix

SOURCE = r"""
#include <stdint.h>

#define MAX_WORLD 8

__device__ __forceinline__ void store_flag(uint32_t* addr, uint32_t value) {
    asm volatile("st.release.sys.global.u32 [%0], %1;" :: "l"(addr), "r"(value) : "memory");
}

__device__ __forceinline__ uint32_t load_flag(const uint32_t* addr) {
    uint32_t value;
    asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(value) : "l"(addr) : "memory");
    return value;
}

// Thread p (p < world) of block b stores `epoch` into word [slot][rank] of rank p's flags, then waits
// until word [slot][p] of its own flags reaches `epoch`.
__device__ __forceinline__ void signal_and_wait(uint32_t* const* flags, int rank, int world, uint32_t epoch, int slot) {
    __syncthreads();  // the whole block's stores are issued ...
    if (threadIdx.x < world) {
        __threadfence_system();  // ... and visible to every GPU before the flag is
        store_flag(flags[threadIdx.x] + slot * world + rank, epoch);
        const uint32_t* mine = flags[rank] + slot * world + threadIdx.x;
        while ((int)(load_flag(mine) - epoch) < 0) {}
    }
    __syncthreads();
}

// A row block is `units` vectors of V. Input block j goes to rank j; slot s of a receive buffer holds
// what rank s sent; output block s is what rank s sent.
template <typename V>
__device__ __forceinline__ void all_to_all(const V* in, V* out, const uint64_t* recv_ptrs, const uint64_t* flag_ptrs,
                                           int rank, int world, long long units, uint32_t epoch, int trailing_barrier,
                                           int max_blocks) {
    __shared__ V* recv[MAX_WORLD];
    __shared__ uint32_t* flags[MAX_WORLD];
    if (threadIdx.x < world) {
        recv[threadIdx.x] = reinterpret_cast<V*>(recv_ptrs[threadIdx.x]);
        flags[threadIdx.x] = reinterpret_cast<uint32_t*>(flag_ptrs[threadIdx.x]);
    }
    __syncthreads();
    const long long per_block = (units + gridDim.x - 1) / gridDim.x;
    const long long begin = blockIdx.x * per_block;
    const long long end = min(begin + per_block, units);
    // 1. push column b of input block j into slot `rank` of rank j's buffer; my own block goes to my output
    for (long long u = begin + threadIdx.x; u < end; u += blockDim.x) {
#pragma unroll
        for (int p = 0; p < MAX_WORLD; ++p) {
            if (p >= world) continue;
            const V x = in[p * units + u];
            if (p == rank) out[rank * units + u] = x;
            else recv[p][rank * units + u] = x;
        }
    }
    // 2. per-peer flags, slot set 0: "column b of my block for you is in your buffer"; wait for every peer's
    signal_and_wait(flags, rank, world, epoch, blockIdx.x);
    // 3. copy column b of every peer's slot out (L2 loads: peers wrote these words)
    for (int s = 0; s < world; ++s) {
        if (s == rank) continue;
        for (long long u = begin + threadIdx.x; u < end; u += blockDim.x) out[s * units + u] = __ldcg(recv[rank] + s * units + u);
    }
    // 4. trailing barrier, slot set 1: no rank pushes the next call's column b into my buffer before I copied it out
    if (trailing_barrier) signal_and_wait(flags, rank, world, epoch, max_blocks + blockIdx.x);
}

#define ALL_TO_ALL_KERNEL(BYTES, V)                                                                                    \
extern "C" __global__ void __launch_bounds__(512, 1) all_to_all_push_##BYTES(                                          \
    const V* in, V* out, const uint64_t* recv_ptrs, const uint64_t* flag_ptrs, int rank, int world,                    \
    long long units, unsigned int epoch, int trailing_barrier, int max_blocks) {                                       \
    all_to_all<V>(in, out, recv_ptrs, flag_ptrs, rank, world, units, epoch, trailing_barrier, max_blocks);             \
}

ALL_TO_ALL_KERNEL(16, uint4)
ALL_TO_ALL_KERNEL(8, uint2)
ALL_TO_ALL_KERNEL(4, unsigned int)
ALL_TO_ALL_KERNEL(2, unsigned short)
ALL_TO_ALL_KERNEL(1, unsigned char)
"""

_states = {}


def _setup(tensor: torch.Tensor, block_bytes: int) -> dict:
    world = dist.get_world_size()
    if world > MAX_WORLD:
        raise ValueError(f"this all-to-all supports up to {MAX_WORLD} ranks, not {world}")
    width = next(w for w in WIDTHS if block_bytes % w == 0)  # depends on the size only: the same on every rank
    units = block_bytes // width
    sms = torch.cuda.get_device_properties(tensor.device).multi_processor_count
    blocks = max(1, min(sms, -(-units // THREADS)))
    recv = runtime.SymmetricBuffer(world * block_bytes, torch.uint8, tensor.device)
    flags = runtime.SymmetricBuffer(2 * sms * world, torch.int32, tensor.device)
    flags.local.zero_()
    torch.cuda.synchronize(tensor.device)
    dist.barrier()  # every rank's flags are zero before anyone signals
    return {"recv": recv, "flags": flags, "width": width, "units": units, "blocks": blocks, "max_blocks": sms,
            "epoch": 0, "kernel": runtime.load_kernel(SOURCE, f"all_to_all_push_{WIDTHS[width]}")}


@torch.no_grad()
def solution(tensor: torch.Tensor) -> torch.Tensor:
    world = dist.get_world_size()
    if tensor.shape[0] % world:
        raise ValueError(f"{tensor.shape[0]} rows do not split into {world} equal blocks")
    out = torch.empty(tensor.shape, dtype=tensor.dtype, device=tensor.device)
    block_bytes = tensor.numel() * tensor.element_size() // world
    if block_bytes == 0:
        return out
    key = (tuple(tensor.shape), tensor.dtype, tensor.device)
    if key not in _states:
        _states[key] = _setup(tensor, block_bytes)
    state = _states[key]
    x = tensor.contiguous()
    if x.data_ptr() % state["width"]:
        x = x.clone()  # fresh allocations are 512-byte aligned
    state["epoch"] += 1  # the call number: the same on every rank
    recv, flags = state["recv"], state["flags"]
    state["kernel"]((state["blocks"],), (THREADS,), (x, out, recv.peer_ptrs, flags.peer_ptrs, recv.rank, world, state["units"],
                                                      state["epoch"], int(TRAILING_BARRIER), state["max_blocks"]))
    return out
