"""Causal ring attention: K/V chunks pushed around the ring through double symmetric buffers.

Mechanism. Every rank owns a symmetric buffer of two K/V slots, [2 slots][K, V][s/W, h, d], and
a few flag words. Steps are numbered globally, ``g = (call - 1) * W + t``, and step ``g`` uses
slot ``g % 2``. At step ``t`` rank ``r`` holds rank ``r - t``'s chunk (its own at ``t = 0``,
straight from the inputs). Under the causal mask rank ``r`` needs exactly the chunks of ranks
``0..r``, and a chunk that wrapped past rank W-1 is needed by nobody, so rank ``r`` runs steps
``t = 0..r`` and passes each chunk it holds on to rank ``r + 1`` (rank W-1 passes nothing on):
(W-1)/2 chunks sent per rank on average instead of W-1.

Two streams per rank. The side (comm) stream, at step ``t``: wait for the chunk of step ``g`` to
land in my slot; wait for the credit "rank r+1 is done with the slot I am about to fill"; copy
the chunk into rank r+1's slot ``(g+1) % 2`` with ``copy_`` (a copy engine, over NVLink) and
raise rank r+1's ready flag to ``g + 2``; once my compute of step ``t`` is done, raise rank
r-1's free flag. The current stream computes step ``t`` (the diagonal block with the causal
mask at ``t = 0``, full blocks after) and merges it into the running output with the
log-sum-exp (online softmax), in fp32 as the reference does. The transfer of the next chunk
thus runs on the copy engine while the SMs compute on the current one.

Synchronisation. Flags are uint32 words in a symmetric buffer, zeroed once (then a host
barrier); each word has one writer, values only grow, waits are ``>=``, so nothing is ever
reset. ``put_flag`` is a one-thread kernel queued after the copy it announces (stream order:
the copy is complete) that does ``__threadfence_system`` and a system-scope release store;
``wait_flag`` spins with system-scope acquire loads, and later work joins it through events.
- ready (rank r's word, written by r-1): ``>= g + 1`` means step ``g``'s chunk is in slot ``g % 2``.
- free (rank r's word, written by r+1): ``>= g`` means rank r+1 has finished step ``g - 1`` (its
  compute and its own send from that slot), so its slot ``(g + 1) % 2`` may be overwritten. At
  its last step of a call a rank writes ``call * W``, "done with this whole call", which is the
  credit the first send of the next call (``g = base``) waits for.
This credit is the ring's trailing barrier: ``TRAILING_BARRIER = False`` drops the wait, and a
rank running ahead overwrites a slot its successor has not yet read (within a call once W > 2,
and across back-to-back calls at any W), which the harness catches. The current stream waits
for the comm stream before returning, and the comm stream waits for the current stream at the
start of each call (the inputs are made there), so no work of a call outlives it.

When it wins. Skipping the chunks nobody needs halves the traffic of the reference's ring, and
the copy engines move K/V without taking SMs from the attention math; with a fused attention
kernel per block the transfer hides completely once a block's compute outlasts one chunk's
copy over NVLink. The contiguous layout still leaves rank W-1 with W blocks of work and rank 0
with one; a zig-zag (load-balanced) layout would fix that but changes which rows a rank owns.
"""

import torch
import torch.distributed as dist

from sandbox import runtime

TRAILING_BARRIER = True
READY, FREE = 0, 32  # flag words (separate 128-byte lines)

SOURCE = r"""
#include <stdint.h>

// Queued after the copy it announces: that copy is complete; make it visible system-wide, then the flag.
extern "C" __global__ void put_flag(uint32_t* flag, unsigned int value) {
    __threadfence_system();
    asm volatile("st.release.sys.global.u32 [%0], %1;" :: "l"(flag), "r"(value) : "memory");
}

extern "C" __global__ void wait_flag(const uint32_t* flag, unsigned int target) {
    uint32_t value;
    do {
        asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(value) : "l"(flag) : "memory");
    } while ((int)(value - target) < 0);
}
"""

_states = {}


def _attend(q, k, v, scale, causal):
    """One query chunk against one K/V chunk (fp32 [s, h, d]): normalised output and log-sum-exp [h, s]."""
    scores = torch.einsum("qhd,khd->hqk", q, k) * scale
    if causal:
        future = torch.ones(q.shape[0], k.shape[0], dtype=torch.bool, device=q.device).triu(1)
        scores = scores.masked_fill(future, float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)
    return torch.einsum("hqk,khd->qhd", torch.exp(scores - lse.unsqueeze(-1)), v), lse


def _setup(k: torch.Tensor) -> dict:
    world, rank = dist.get_world_size(), dist.get_rank()
    kv = runtime.SymmetricBuffer((2, 2, *k.shape), k.dtype, k.device)  # [slot][K or V][s/W, h, d]
    flags = runtime.SymmetricBuffer(64, torch.int32, k.device)
    flags.local.zero_()
    flag_base = flags.peer_ptrs.tolist()  # every rank's flag words, as addresses
    torch.cuda.synchronize(k.device)
    dist.barrier()  # every rank's flags are zero before anyone signals
    nxt, prv = (rank + 1) % world, (rank - 1) % world
    return {
        "kv": kv.local, "next_kv": kv.peer(nxt), "flags": flags, "epoch": 0,
        "my_ready": flag_base[rank] + 4 * READY, "my_free": flag_base[rank] + 4 * FREE,
        "next_ready": flag_base[nxt] + 4 * READY, "prev_free": flag_base[prv] + 4 * FREE,
        "comm": torch.cuda.Stream(device=k.device),
        "arrived": [torch.cuda.Event() for _ in range(world)], "computed": [torch.cuda.Event() for _ in range(world)],
        "put": runtime.load_kernel(SOURCE, "put_flag"), "wait": runtime.load_kernel(SOURCE, "wait_flag"),
    }


@torch.no_grad()
def solution(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    rank, world = dist.get_rank(), dist.get_world_size()
    key = (tuple(k.shape), k.dtype, k.device)
    if key not in _states:
        _states[key] = _setup(k)
    st = _states[key]
    st["epoch"] += 1
    base = (st["epoch"] - 1) * world  # global number of this call's step 0
    put, wait = st["put"], st["wait"]
    main, comm = torch.cuda.current_stream(q.device), st["comm"]
    comm.wait_stream(main)  # k and v were made on the current stream
    scale = q.shape[-1] ** -0.5
    qf = q.float()
    steps = rank + 1  # chunks of ranks rank, rank-1, ..., 0
    sends = rank + 1 < world  # rank r+1 needs every chunk I hold
    out = lse = None
    for t in range(steps):
        g = base + t
        slot = g % 2
        with torch.cuda.stream(comm):
            if t > 0:
                wait((1,), (1,), (st["my_ready"], g + 1))  # step g's chunk has landed in my slot g % 2
                st["arrived"][t].record(comm)
            if sends:
                if TRAILING_BARRIER:
                    wait((1,), (1,), (st["my_free"], g))  # rank r+1 is done with its slot (g + 1) % 2
                dst = st["next_kv"][(g + 1) % 2]
                if t == 0:
                    dst[0].copy_(k)
                    dst[1].copy_(v)
                else:
                    dst.copy_(st["kv"][slot])
                put((1,), (1,), (st["next_ready"], g + 2))  # rank r+1's step g+1 chunk is in place
        if t == 0:
            block_out, block_lse = _attend(qf, k.float(), v.float(), scale, causal=True)
            out, lse = block_out, block_lse
        else:
            main.wait_event(st["arrived"][t])
            chunk = st["kv"][slot]
            block_out, block_lse = _attend(qf, chunk[0].float(), chunk[1].float(), scale, causal=False)
            merged = torch.logaddexp(lse, block_lse)
            out = (out * torch.exp(lse - merged).transpose(0, 1).unsqueeze(-1)
                   + block_out * torch.exp(block_lse - merged).transpose(0, 1).unsqueeze(-1))
            lse = merged
        if rank > 0:  # rank r-1 fills my slots: tell it when I am done with this one
            st["computed"][t].record(main)
            with torch.cuda.stream(comm):
                comm.wait_event(st["computed"][t])
                put((1,), (1,), (st["prev_free"], g + 1 if t + 1 < steps else base + world))
    main.wait_stream(comm)  # join: every copy and flag of this call precedes what follows it
    return out.to(q.dtype)
