"""GEMM + reduce-scatter where the GEMM's output goes straight into the owner's buffer.

Mechanism. Every rank owns a symmetric receive buffer of ``world`` slots, [W, s/W, n]: slot ``p``
receives rank ``p``'s partial product for this rank's rows. Each call, rank ``r`` computes the
partial product of each destination's row block, ``x[rows of d] @ w``, with cuBLAS writing its
result directly into slot ``r`` of rank ``d``'s buffer (``torch.mm(..., out=peer_view)``: the
GEMM's epilogue stores travel over NVLink, there is no local partial and no copy). Peers come
first, in the order r+1, r+2, ... so that the ranks write to different destinations at once, and
my own block last. A barrier; then every rank sums its W received partials in fp32 and rounds
once to the output dtype (more accurate than a ring's bf16 partial sums); then a trailing
barrier.

Synchronisation. Both barriers are symmetric memory's device-side barrier on the current
stream (signal-pad handshakes, each consumed by its matching wait, so back-to-back barriers
need no resetting). The first says "every partial has landed in its owner's buffer" (the GEMM
kernels precede it in stream order, so their stores are complete and are released by the
barrier's system-scope signal). The trailing one says "every rank has finished summing its
buffer": without it (``TRAILING_BARRIER = False``), a fast rank's next-call GEMMs would
overwrite a slot that a slower peer is still summing, and the harness sees it.

When it wins. The reduce-scatter moves (W-1)/W of the partial product per rank, written once
by the GEMM that produced it: no extra HBM round trip for the partial, no staging. It pays
when the output is large relative to the GEMM's inputs; overlapping the sends with the GEMM is
free because each destination's GEMM writes its own block as it finishes. Double-buffering the
receive slots by call parity would let the first barrier of the next call replace the trailing
one (one barrier per call) at twice the memory.
"""

import torch
import torch.distributed as dist

from sandbox import runtime

TRAILING_BARRIER = True

_states = {}


def _setup(x: torch.Tensor, w: torch.Tensor) -> dict:
    world, rank = dist.get_world_size(), dist.get_rank()
    rows = x.shape[0] // world
    recv = runtime.SymmetricBuffer((world, rows, w.shape[1]), x.dtype, x.device)
    torch.cuda.synchronize(x.device)
    dist.barrier()  # every rank's buffer (and its barrier's signal pad) exists before anyone writes or signals
    return {
        "recv": recv,
        "slots": [recv.peer(d)[rank] for d in range(world)],  # my slot in rank d's buffer: [rows, n]
        "order": [(rank + i) % world for i in range(1, world + 1)],  # peers nearest first, myself last
    }


@torch.no_grad()
def solution(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    world = dist.get_world_size()
    if x.shape[0] % world:
        raise ValueError(f"{x.shape[0]} rows do not split into {world} equal blocks")
    rows = x.shape[0] // world
    key = (tuple(x.shape), tuple(w.shape), x.dtype, x.device)
    if key not in _states:
        _states[key] = _setup(x, w)
    state = _states[key]
    for d in state["order"]:
        torch.mm(x[d * rows:(d + 1) * rows], w, out=state["slots"][d])  # epilogue stores into rank d's buffer
    state["recv"].barrier()  # every partial of my rows is in my buffer
    out = state["recv"].local.sum(dim=0, dtype=torch.float32).to(x.dtype)  # fp32 accumulation, one rounding
    if TRAILING_BARRIER:
        state["recv"].barrier()  # every rank has summed: the next call may overwrite the slots
    return out
