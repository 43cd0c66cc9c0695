import torch
import torch.distributed as dist


@torch.no_grad()
def solution(shard: torch.Tensor) -> torch.Tensor:
    """Gather every rank's [rows, hidden] shard; every rank returns [world * rows, hidden]."""
    world = dist.get_world_size()
    out = shard.new_empty((world * shard.shape[0], *shard.shape[1:]))
    dist.all_gather_into_tensor(out, shard.contiguous())
    return out
