"""All-reduce (sum) over symmetric memory: one-shot for small buffers, two-shot for large ones.

Mechanism. Every rank owns a symmetric buffer (one allocation per rank, each mapped into every
rank's address space) as large as the input, padded to a multiple of ``world`` 16-byte vectors.
One persistent kernel does the whole collective; its grid is at most one block per SM, and
block ``b`` of every rank works on the same "column" ``b`` of the buffer, so blocks only ever
wait for the blocks with their own index on other ranks, never for the rest of their own grid.

- one-shot (below ``TWO_SHOT_MIN_BYTES``): copy the input into my buffer; barrier; every rank
  reads the whole column from all ``world`` buffers (16-byte loads, ranks 0..W-1 in the same
  order everywhere, fp32 accumulation) and writes its output; trailing barrier. One round of
  latency, but each rank reads ``world`` times the buffer over NVLink.
- two-shot: rank ``s`` owns slice ``s`` of the buffer. Copy the input in; barrier; reduce-scatter
  by pulling my slice from every peer and summing in fp32; all-gather by storing the reduced
  slice into the same place of every peer's buffer (the sum overwrites the very words it was
  read from, by the same thread, so no barrier is needed in between); barrier; copy my buffer
  (now the full sum) to the output. Each rank moves 2 (W-1)/W of the buffer: bandwidth-optimal.

Synchronisation. Flags live in a second symmetric buffer (uint32, zeroed once, then a host
barrier). ``block_barrier(slot)``: thread ``p < world`` of block ``b`` stores ``epoch`` into word
``[slot][me]`` of rank ``p``'s flags with a system-scope release (after ``__syncthreads`` and
``__threadfence_system``, so the whole block's stores are visible first), then spins with
system-scope acquire loads until word ``[slot][p]`` of its own flags reaches ``epoch``. The
epoch is the call number, the same on every rank; each word has exactly one writer and only
grows, so flags are never reset and a flag left over from an earlier call can never satisfy
a later wait.

Why back-to-back calls are safe:
- one-shot: after the first barrier every rank reads every peer's buffer. Without the trailing
  barrier a rank that finished early would start the next call and copy its next input over
  the buffer a slower peer is still summing (``TRAILING_BARRIER = False`` shows exactly this
  race). With it, no rank leaves call ``e`` until all ranks have finished reading column ``b``.
- two-shot: the second barrier already is the trailing barrier. My buffer's column ``b`` is
  written by peers only between the two barriers, and after the second one only I read it; the
  next call's copy-in happens before the next first barrier, which no peer passes until I have
  arrived, i.e. until I finished copying out. So the two-shot path takes two barriers per call,
  and ``TRAILING_BARRIER`` does not change it.

When it wins. One-shot has the least latency (two flag round trips, one kernel) and wins for
small buffers, where NCCL's ring or tree pays several hops; two-shot halves the NVLink traffic
of a ring all-reduce's worst rank for large buffers and keeps every link busy at once. No NVLink
switch reduction is used (it is off on these machines).
"""

import torch
import torch.distributed as dist

from sandbox import runtime

TRAILING_BARRIER = True
TWO_SHOT_MIN_BYTES = 512 * 1024  # one-shot below this (latency-bound), two-shot from here (bandwidth-bound)
THREADS = 512
MAX_WORLD = 8
BARRIER_SLOTS = 2  # barrier slot sets per call: [0] after copy-in, [1] trailing (one-shot) or after the gather (two-shot)

SOURCE = r"""
#include <cuda_bf16.h>
#include <cuda_fp16.h>
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

// Block b of every rank meets here. Thread p tells rank p "block b of `rank` arrived at `slot` in
// call `epoch`" and waits until rank p has told it the same. Every word has one writer and only grows.
__device__ __forceinline__ void block_barrier(uint32_t* const* flags, int rank, int world, uint32_t epoch, int slot) {
    __syncthreads();  // every thread of the block has issued its stores ...
    if (threadIdx.x < world) {
        __threadfence_system();  // ... and they are visible to every GPU before the flag is
        store_flag(flags[threadIdx.x] + slot * world + rank, epoch);
        const uint32_t* mine = flags[rank] + slot * world + threadIdx.x;
        while ((int)(load_flag(mine) - epoch) < 0) {}
    }
    __syncthreads();  // the acquire by thread p orders the whole block's later loads after peer p's stores
}

// 16 bytes of T <-> E floats.
template <typename T> struct Pack;
template <> struct Pack<__nv_bfloat16> {
    static constexpr int E = 8;
    __device__ static void add(float* acc, const uint4& v) {
        const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&v);
#pragma unroll
        for (int i = 0; i < 4; ++i) { float2 f = __bfloat1622float2(h[i]); acc[2 * i] += f.x; acc[2 * i + 1] += f.y; }
    }
    __device__ static uint4 pack(const float* acc) {
        uint4 v;
        __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&v);
#pragma unroll
        for (int i = 0; i < 4; ++i) h[i] = __floats2bfloat162_rn(acc[2 * i], acc[2 * i + 1]);
        return v;
    }
};
template <> struct Pack<__half> {
    static constexpr int E = 8;
    __device__ static void add(float* acc, const uint4& v) {
        const __half2* h = reinterpret_cast<const __half2*>(&v);
#pragma unroll
        for (int i = 0; i < 4; ++i) { float2 f = __half22float2(h[i]); acc[2 * i] += f.x; acc[2 * i + 1] += f.y; }
    }
    __device__ static uint4 pack(const float* acc) {
        uint4 v;
        __half2* h = reinterpret_cast<__half2*>(&v);
#pragma unroll
        for (int i = 0; i < 4; ++i) h[i] = __floats2half2_rn(acc[2 * i], acc[2 * i + 1]);
        return v;
    }
};
template <> struct Pack<float> {
    static constexpr int E = 4;
    __device__ static void add(float* acc, const uint4& v) {
        acc[0] += __uint_as_float(v.x); acc[1] += __uint_as_float(v.y); acc[2] += __uint_as_float(v.z); acc[3] += __uint_as_float(v.w);
    }
    __device__ static uint4 pack(const float* acc) {
        return make_uint4(__float_as_uint(acc[0]), __float_as_uint(acc[1]), __float_as_uint(acc[2]), __float_as_uint(acc[3]));
    }
};

// Vector v of the input (elements v*E .. v*E+E-1); elements at or past n read as zero.
template <typename T>
__device__ __forceinline__ uint4 load_input(const T* in, long long v, long long n) {
    constexpr int E = Pack<T>::E;
    if ((v + 1) * E <= n) return __ldg(reinterpret_cast<const uint4*>(in) + v);  // the wrapper passes 16-byte aligned inputs
    union { uint4 vec; T elem[E]; } tail;
    tail.vec = make_uint4(0u, 0u, 0u, 0u);
#pragma unroll
    for (int i = 0; i < E; ++i) if (v * E + i < n) tail.elem[i] = in[v * E + i];
    return tail.vec;
}

template <typename T>
__device__ __forceinline__ void store_output(T* out, long long v, long long n, uint4 value) {
    constexpr int E = Pack<T>::E;
    if ((v + 1) * E <= n) { reinterpret_cast<uint4*>(out)[v] = value; return; }
    union { uint4 vec; T elem[E]; } tail;
    tail.vec = value;
#pragma unroll
    for (int i = 0; i < E; ++i) if (v * E + i < n) out[v * E + i] = tail.elem[i];
}

// Sum of vector v over every rank's buffer, ranks in order 0..world-1 (the same result on every
// rank), fp32 accumulation. All loads are issued before the first add.
template <typename T>
__device__ __forceinline__ uint4 sum_over_ranks(uint4* const* bufs, int world, long long v) {
    uint4 vals[MAX_WORLD];
#pragma unroll
    for (int p = 0; p < MAX_WORLD; ++p) if (p < world) vals[p] = __ldcg(bufs[p] + v);  // L2 only: peers wrote these
    float acc[Pack<T>::E];
#pragma unroll
    for (int i = 0; i < Pack<T>::E; ++i) acc[i] = 0.f;
#pragma unroll
    for (int p = 0; p < MAX_WORLD; ++p) if (p < world) Pack<T>::add(acc, vals[p]);
    return Pack<T>::pack(acc);
}

template <typename T>
__device__ __forceinline__ void one_shot(const T* in, T* out, const uint64_t* buf_ptrs, const uint64_t* flag_ptrs,
                                         int rank, int world, long long n, uint32_t epoch, int trailing_barrier, int max_blocks) {
    __shared__ uint4* bufs[MAX_WORLD];
    __shared__ uint32_t* flags[MAX_WORLD];
    if (threadIdx.x < world) {
        bufs[threadIdx.x] = reinterpret_cast<uint4*>(buf_ptrs[threadIdx.x]);
        flags[threadIdx.x] = reinterpret_cast<uint32_t*>(flag_ptrs[threadIdx.x]);
    }
    __syncthreads();
    const long long vectors = (n + Pack<T>::E - 1) / Pack<T>::E;
    const long long per_block = (vectors + gridDim.x - 1) / gridDim.x;
    const long long begin = blockIdx.x * per_block;
    const long long end = min(begin + per_block, vectors);
    for (long long v = begin + threadIdx.x; v < end; v += blockDim.x) bufs[rank][v] = load_input(in, v, n);
    block_barrier(flags, rank, world, epoch, blockIdx.x);  // column b of every buffer holds its rank's input
    for (long long v = begin + threadIdx.x; v < end; v += blockDim.x) store_output(out, v, n, sum_over_ranks<T>(bufs, world, v));
    if (trailing_barrier) block_barrier(flags, rank, world, epoch, max_blocks + blockIdx.x);  // nobody reads column b any more
}

template <typename T>
__device__ __forceinline__ void two_shot(const T* in, T* out, const uint64_t* buf_ptrs, const uint64_t* flag_ptrs,
                                         int rank, int world, long long n, uint32_t epoch, int max_blocks) {
    __shared__ uint4* bufs[MAX_WORLD];
    __shared__ uint32_t* flags[MAX_WORLD];
    if (threadIdx.x < world) {
        bufs[threadIdx.x] = reinterpret_cast<uint4*>(buf_ptrs[threadIdx.x]);
        flags[threadIdx.x] = reinterpret_cast<uint32_t*>(flag_ptrs[threadIdx.x]);
    }
    __syncthreads();
    const long long vectors = (n + Pack<T>::E - 1) / Pack<T>::E;
    const long long slice = (vectors + world - 1) / world;  // rank s owns vectors [s*slice, (s+1)*slice)
    const long long per_block = (slice + gridDim.x - 1) / gridDim.x;
    const long long begin = blockIdx.x * per_block;
    const long long end = min(begin + per_block, slice);
    // 1. my input into my buffer: column b of every slice (the padding past n becomes zeros)
    for (int s = 0; s < world; ++s)
        for (long long j = begin + threadIdx.x; j < end; j += blockDim.x) bufs[rank][s * slice + j] = load_input(in, s * slice + j, n);
    block_barrier(flags, rank, world, epoch, blockIdx.x);
    // 2. reduce-scatter: pull column b of my slice from every rank and sum it; all-gather: store the sum
    //    into the same words of every rank's buffer (each word is read, then written, by this one thread)
    for (long long j = begin + threadIdx.x; j < end; j += blockDim.x) {
        const long long v = rank * slice + j;
        const uint4 sum = sum_over_ranks<T>(bufs, world, v);
#pragma unroll
        for (int p = 0; p < MAX_WORLD; ++p) if (p < world) bufs[p][v] = sum;
    }
    block_barrier(flags, rank, world, epoch, max_blocks + blockIdx.x);  // every slice's column b is reduced everywhere
    // 3. my buffer now holds the whole sum: copy column b of every slice out
    for (int s = 0; s < world; ++s)
        for (long long j = begin + threadIdx.x; j < end; j += blockDim.x) {
            const long long v = s * slice + j;
            if (v < vectors) store_output(out, v, n, __ldcg(bufs[rank] + v));
        }
}

#define ALL_REDUCE_KERNELS(NAME, T)                                                                         \
extern "C" __global__ void __launch_bounds__(512, 1) all_reduce_one_shot_##NAME(                                  \
    const T* in, T* out, const uint64_t* buf_ptrs, const uint64_t* flag_ptrs, int rank, int world, long long n,   \
    unsigned int epoch, int trailing_barrier, int max_blocks) {                                                   \
    one_shot<T>(in, out, buf_ptrs, flag_ptrs, rank, world, n, epoch, trailing_barrier, max_blocks);               \
}                                                                                                                 \
extern "C" __global__ void __launch_bounds__(512, 1) all_reduce_two_shot_##NAME(                                  \
    const T* in, T* out, const uint64_t* buf_ptrs, const uint64_t* flag_ptrs, int rank, int world, long long n,   \
    unsigned int epoch, int trailing_barrier, int max_blocks) {  /* the second barrier is the trailing one */     \
    two_shot<T>(in, out, buf_ptrs, flag_ptrs, rank, world, n, epoch, max_blocks);                                 \
}

ALL_REDUCE_KERNELS(bf16, __nv_bfloat16)
ALL_REDUCE_KERNELS(f16, __half)
ALL_REDUCE_KERNELS(f32, float)
"""

_SUFFIX = {torch.bfloat16: "bf16", torch.float16: "f16", torch.float32: "f32"}
_states = {}


def _setup(tensor: torch.Tensor) -> dict:
    world = dist.get_world_size()
    if world > MAX_WORLD:
        raise ValueError(f"this all-reduce supports up to {MAX_WORLD} ranks, not {world}")
    if tensor.dtype not in _SUFFIX:
        raise TypeError(f"unsupported dtype {tensor.dtype}")
    n, per_vector = tensor.numel(), 16 // tensor.element_size()
    vectors = -(-n // per_vector)
    slice_vectors = -(-vectors // world)
    two_shot = n * tensor.element_size() >= TWO_SHOT_MIN_BYTES
    sms = torch.cuda.get_device_properties(tensor.device).multi_processor_count
    work = slice_vectors if two_shot else vectors  # the vectors the grid splits into block columns
    blocks = max(1, min(sms, -(-work // THREADS)))  # persistent: at most one block per SM, the same on every rank
    buffer = runtime.SymmetricBuffer(world * slice_vectors * per_vector, tensor.dtype, tensor.device)
    flags = runtime.SymmetricBuffer(BARRIER_SLOTS * sms * world, torch.int32, tensor.device)
    flags.local.zero_()
    torch.cuda.synchronize(tensor.device)
    dist.barrier()  # every rank's flags are zero before anyone signals
    name = f"all_reduce_{'two' if two_shot else 'one'}_shot_{_SUFFIX[tensor.dtype]}"
    return {"buffer": buffer, "flags": flags, "blocks": blocks, "max_blocks": sms, "epoch": 0,
            "kernel": runtime.load_kernel(SOURCE, name)}


@torch.no_grad()
def solution(tensor: torch.Tensor) -> torch.Tensor:
    out = torch.empty(tensor.shape, dtype=tensor.dtype, device=tensor.device)
    if tensor.numel() == 0:
        return out
    x = tensor.contiguous()
    if x.data_ptr() % 16:
        x = x.clone()  # the kernel reads 16-byte vectors
    key = (tensor.numel(), tensor.dtype, tensor.device)
    if key not in _states:
        _states[key] = _setup(x)
    state = _states[key]
    state["epoch"] += 1  # the call number: the same on every rank, so flags compare against it
    buffer, flags = state["buffer"], state["flags"]
    state["kernel"]((state["blocks"],), (THREADS,), (x, out, buffer.peer_ptrs, flags.peer_ptrs, buffer.rank, buffer.world,
                                                      x.numel(), state["epoch"], int(TRAILING_BARRIER), state["max_blocks"]))
    return out
