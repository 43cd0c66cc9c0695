"""All-gather by peer stores: each rank pushes its shard straight into every peer's receive buffer.

Mechanism. Every rank owns a symmetric receive buffer of ``world`` slots, one per source rank,
each as large as a shard. One kernel does the whole collective: block ``b`` of rank ``r`` takes
column ``b`` of its shard (a contiguous range of vectors of 16, 8, 4, 2 or 1 bytes, the widest
that divides the shard), writes it into slot ``r`` of every peer's buffer (NVLink stores: posted
writes, no round trip) and into its own output, then raises a per-peer flag "column ``b`` of my
shard is in your buffer" in every peer's flags. It then waits until every peer's flag for
column ``b`` has arrived in its own flags, copies column ``b`` of every peer's slot from its
receive buffer into the output (a fresh tensor, as the harness wants), and meets the other
ranks' block ``b`` at a trailing barrier.

Synchronisation. Flags are uint32 words in a second symmetric buffer, zeroed once (then a host
barrier). Word ``[b][s]`` of rank ``r``'s flags has a single writer, block ``b`` of rank ``s``,
which stores the call number ``epoch`` with a system-scope release after ``__syncthreads`` and
``__threadfence_system`` (so all of the block's pushes are visible first); the receiver spins
with system-scope acquire loads until the word reaches ``epoch``. Epochs only grow, so flags
are never reset. The trailing barrier (the same flag protocol on a second set of words) keeps a
fast rank from pushing call ``e+1``'s shard into a peer's slot while that peer is still copying
call ``e``'s data out of it; ``TRAILING_BARRIER = False`` removes it and the harness sees
outputs mixing two calls. With it, a rank passes its block-``b`` barrier of call ``e`` only after
every rank's block ``b`` has finished copying out, and a flag of call ``e+1`` can never be taken
for one of call ``e``.

When it wins. A ring all-gather takes W-1 dependent steps and stages every shard through every
rank; peer stores send each shard once from its owner to all W-1 peers at the same time over
NVSwitch, so the collective costs one flag round trip plus (W-1)/W of the output over the
links. For small shards (latency) and medium ones it beats NCCL's ring; at very large sizes the
copy engines (cudaMemcpyAsync from peer buffers) can match it without using SMs.
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
// until word [slot][p] of its own flags reaches `epoch`: "block b of every rank got here in call epoch".
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

// The shard is `units` vectors of V; slot s of every receive buffer holds rank s's shard.
template <typename V>
__device__ __forceinline__ void all_gather(const V* shard, V* out, const uint64_t* recv_ptrs, const uint64_t* flag_ptrs,
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
    // 1. push column b of my shard into slot `rank` of every peer's buffer, and into my own output
    for (long long u = begin + threadIdx.x; u < end; u += blockDim.x) {
        const V x = shard[u];
        out[rank * units + u] = x;
#pragma unroll
        for (int p = 0; p < MAX_WORLD; ++p)
            if (p < world && p != rank) recv[p][rank * units + u] = x;
    }
    // 2. per-peer flags, slot set 0: tell every peer "column b of my shard is in your buffer", and
    //    wait until every peer has told me the same
    signal_and_wait(flags, rank, world, epoch, blockIdx.x);
    // 3. copy column b of every peer's slot out (L2 loads: peers wrote these words)
    for (int s = 0; s < world; ++s) {
        if (s == rank) continue;
        for (long long u = begin + threadIdx.x; u < end; u += blockDim.x) out[s * units + u] = __ldcg(recv[rank] + s * units + u);
    }
    // 4. trailing barrier, slot set 1: no rank pushes the next call's column b into my buffer before I copied it out
    if (trailing_barrier) signal_and_wait(flags, rank, world, epoch, max_blocks + blockIdx.x);
}

#define ALL_GATHER_KERNEL(BYTES, V)                                                                                    \
extern "C" __global__ void __launch_bounds__(512, 1) all_gather_push_##BYTES(                                          \
    const V* shard, V* out, const uint64_t* recv_ptrs, const uint64_t* flag_ptrs, int rank, int world,                 \
    long long units, unsigned int epoch, int trailing_barrier, int max_blocks) {                                       \
    all_gather<V>(shard, out, recv_ptrs, flag_ptrs, rank, world, units, epoch, trailing_barrier, max_blocks);          \
}

ALL_GATHER_KERNEL(16, uint4)
ALL_GATHER_KERNEL(8, uint2)
ALL_GATHER_KERNEL(4, unsigned int)
ALL_GATHER_KERNEL(2, unsigned short)
ALL_GATHER_KERNEL(1, unsigned char)
"""

_states = {}


def _setup(shard: torch.Tensor, nbytes: int) -> dict:
    world = dist.get_world_size()
    if world > MAX_WORLD:
        raise ValueError(f"this all-gather supports up to {MAX_WORLD} ranks, not {world}")
    width = next(w for w in WIDTHS if nbytes % w == 0)  # depends on the size only: the same on every rank
    units = nbytes // width
    sms = torch.cuda.get_device_properties(shard.device).multi_processor_count
    blocks = max(1, min(sms, -(-units // THREADS)))
    recv = runtime.SymmetricBuffer(world * nbytes, torch.uint8, shard.device)
    flags = runtime.SymmetricBuffer(2 * sms * world, torch.int32, shard.device)
    flags.local.zero_()
    torch.cuda.synchronize(shard.device)
    dist.barrier()  # every rank's flags are zero before anyone signals
    return {"recv": recv, "flags": flags, "width": width, "units": units, "blocks": blocks, "max_blocks": sms,
            "epoch": 0, "kernel": runtime.load_kernel(SOURCE, f"all_gather_push_{WIDTHS[width]}")}


@torch.no_grad()
def solution(shard: torch.Tensor) -> torch.Tensor:
    world = dist.get_world_size()
    out = shard.new_empty((world * shard.shape[0], *shard.shape[1:]))
    nbytes = shard.numel() * shard.element_size()
    if nbytes == 0:
        return out
    key = (tuple(shard.shape), shard.dtype, shard.device)
    if key not in _states:
        _states[key] = _setup(shard, nbytes)
    state = _states[key]
    x = shard.contiguous()
    if x.data_ptr() % state["width"]:
        x = x.clone()  # fresh allocations are 512-byte aligned
    state["epoch"] += 1  # the call number: the same on every rank
    recv, flags = state["recv"], state["flags"]
    state["kernel"]((state["blocks"],), (THREADS,), (x, out, recv.peer_ptrs, flags.peer_ptrs, recv.rank, world, state["units"],
                                                      state["epoch"], int(TRAILING_BARRIER), state["max_blocks"]))
    return out
