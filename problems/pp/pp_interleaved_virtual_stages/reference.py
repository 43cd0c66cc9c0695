import torch
import torch.distributed as dist
import torch.nn.functional as F


def _exchange(send: torch.Tensor | None, send_to: int, recv_like: torch.Tensor | None, recv_from: int):
    """One batched P2P exchange (Megatron's send_forward_recv_forward): either half may be None."""
    ops, received = [], None
    if recv_like is not None:
        received = torch.empty_like(recv_like)
        ops.append(dist.P2POp(dist.irecv, received, recv_from))
    if send is not None:
        ops.append(dist.P2POp(dist.isend, send.contiguous(), send_to))
    if ops:
        for request in dist.batch_isend_irecv(ops):
            request.wait()
    return received


@torch.no_grad()
def solution(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """Forward of every microbatch through 2 * world virtual stages; this rank holds virtual
    stages `rank` (chunk 0) and `world + rank` (chunk 1). Returns chunk 1's outputs,
    [microbatches, tokens, hidden]."""
    rank, world = dist.get_rank(), dist.get_world_size()
    microbatches = x.shape[0]
    chunks = w.shape[0]
    next_rank, prev_rank = (rank + 1) % world, (rank - 1) % world
    steps = microbatches * chunks

    def work(step: int) -> tuple[int, int]:
        """Megatron's order: groups of `world` microbatches, each group through chunk 0 then chunk 1."""
        group, within = divmod(step, world * chunks)
        return within // world, group * world + within % world  # (chunk, microbatch)

    def receives(step: int) -> bool:
        chunk, _ = work(step)
        return not (rank == 0 and chunk == 0)  # rank 0's chunk 0 reads the data

    out = torch.empty_like(x)
    h = _exchange(None, next_rank, x[0], prev_rank) if receives(0) else None
    for step in range(steps):
        chunk, m = work(step)
        if rank == 0 and chunk == 0:
            h = x[m]
        y = h + F.gelu(h @ w[chunk], approximate="tanh")
        if chunk == chunks - 1:
            out[m] = y
        is_output = rank == world - 1 and chunk == chunks - 1  # the model's output goes nowhere
        following = step + 1 < steps and receives(step + 1)
        h = _exchange(None if is_output else y, next_rank, x[0] if following else None, prev_rank)
    return out
