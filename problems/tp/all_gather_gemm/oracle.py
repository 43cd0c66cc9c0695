"""All-gather + GEMM with the gather on the copy engines, hidden under the GEMM (two streams).

Mechanism. Every rank owns a symmetric buffer holding its own [s/W, k] shard of X. Each call:

1. (current stream) copy my shard ``x`` into my symmetric buffer; the side stream waits for it.
2. (side stream) a barrier: every rank's shard is in its buffer. Then, for the peers in the order
   r+1, r+2, ..., r-1 (so that the ranks start on different sources), pull peer p's shard with
   ``staging[p].copy_(peer_view)``: a cudaMemcpyAsync from the peer's memory, run by a copy
   engine over NVLink, which costs no SM time. After each pull, record an event.
3. (current stream) meanwhile compute my own rows, ``x @ w``, straight from the input; then for
   each peer in the same order wait for its event and compute ``staging[p] @ w`` into its rows
   of the output. Pull i+1 runs while GEMM i computes: communication hides under compute, and
   only the first pull's latency is exposed (and it hides under the GEMM on my own rows).
4. (side stream) after the last pull, the trailing barrier; the current stream then waits for
   the side stream (the join), so nothing of this call is left running on the side stream when
   the call returns.

Synchronisation. Both barriers are symmetric memory's device-side barrier (a one-block kernel
of signal-pad handshakes on the side stream; each handshake is consumed by the wait that
matches it, so barriers can follow each other with no resetting). The first says "every shard
is in place". The trailing one says "every rank has finished pulling from every buffer", and
because the next call's copy into my buffer (step 1, current stream) comes after the join, a
fast rank can never overwrite its shard while a slower peer's copy engine is still reading it.
``TRAILING_BARRIER = False`` removes it and the harness sees the race. The staging buffer is
written only by the side stream after it waited for the current stream at the start of the
call, i.e. after the previous call's GEMMs read it, and the output is allocated and written on
the current stream only, so the caching allocator never sees a cross-stream use.

When it wins. When the GEMM takes longer than the gather (large k and n/W), the gather costs
almost nothing: the copy engines move the data while every SM does the math. A fused kernel
that reads peers' memory from inside the GEMM avoids the staging copy, but competes with the
math for SMs; this is the TransformerEngine/userbuffers-style overlap with cuBLAS untouched.
"""

import torch
import torch.distributed as dist

from sandbox import runtime

TRAILING_BARRIER = True

_states = {}


def _setup(x: torch.Tensor) -> dict:
    world, rank = dist.get_world_size(), dist.get_rank()
    xbuf = runtime.SymmetricBuffer(tuple(x.shape), x.dtype, x.device)
    torch.cuda.synchronize(x.device)
    dist.barrier()  # every rank's buffer (and its barrier's signal pad) exists before the first barrier
    return {
        "xbuf": xbuf,
        "peers": [xbuf.peer(p) for p in range(world)],  # peer p's shard, readable from here
        "staging": torch.empty((world, *x.shape), dtype=x.dtype, device=x.device),
        "side": torch.cuda.Stream(device=x.device),
        "landed": [torch.cuda.Event() for _ in range(world)],
        "order": [(rank + i) % world for i in range(1, world)],  # peers, nearest first
    }


@torch.no_grad()
def solution(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    world, rank = dist.get_world_size(), dist.get_rank()
    rows = x.shape[0]
    key = (tuple(x.shape), x.dtype, x.device)
    if key not in _states:
        _states[key] = _setup(x)
    state = _states[key]
    main, side = torch.cuda.current_stream(x.device), state["side"]
    out = torch.empty((world * rows, w.shape[1]), dtype=x.dtype, device=x.device)

    state["xbuf"].local.copy_(x)  # my shard into my symmetric buffer
    side.wait_stream(main)  # the side stream starts after that copy (and after the inputs were made)
    with torch.cuda.stream(side):
        state["xbuf"].barrier()  # every rank's shard is in place
        for p in state["order"]:
            state["staging"][p].copy_(state["peers"][p])  # copy engine, peer -> local, over NVLink
            state["landed"][p].record(side)
        if TRAILING_BARRIER:
            state["xbuf"].barrier()  # every rank has pulled every shard: buffers may be overwritten

    torch.mm(x, w, out=out[rank * rows:(rank + 1) * rows])  # my own rows, while the first pull runs
    for p in state["order"]:
        main.wait_event(state["landed"][p])
        torch.mm(state["staging"][p], w, out=out[p * rows:(p + 1) * rows])
    main.wait_stream(side)  # join: the trailing barrier precedes everything after this call
    return out
