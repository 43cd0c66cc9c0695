import torch
import torch.distributed as dist


@torch.no_grad()
def solution(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """Row-parallel linear with sequence parallelism: the partial product x @ w is summed over
    ranks and this rank keeps its block of rows, [s/world, n]."""
    world = dist.get_world_size()
    partial = torch.matmul(x, w)
    out = partial.new_empty((partial.shape[0] // world, partial.shape[1]))
    dist.reduce_scatter_tensor(out, partial, op=dist.ReduceOp.SUM)
    return out
