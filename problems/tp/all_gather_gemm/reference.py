import torch
import torch.distributed as dist


@torch.no_grad()
def solution(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """Gather the full sequence from every rank's [s/world, k] shard, then multiply by this rank's
    column shard of the weight: returns [s, n/world]."""
    world = dist.get_world_size()
    full = x.new_empty((world * x.shape[0], x.shape[1]))
    dist.all_gather_into_tensor(full, x.contiguous())
    return torch.matmul(full, w)
