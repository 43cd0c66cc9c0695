import torch
import torch.distributed as dist


@torch.no_grad()
def solution(tensor: torch.Tensor) -> torch.Tensor:
    """Sum `tensor` over ranks and keep this rank's block of rows: [rows / world, ...]."""
    world = dist.get_world_size()
    out = tensor.new_empty((tensor.shape[0] // world, *tensor.shape[1:]))
    dist.reduce_scatter_tensor(out, tensor.contiguous(), op=dist.ReduceOp.SUM)
    return out
