"""Wrong on one rank: the last rank forgets to add its own contribution."""
import torch
import torch.distributed as dist


@torch.no_grad()
def solution(tensor):
    out = tensor.clone()
    dist.all_reduce(out)
    if dist.get_rank() == dist.get_world_size() - 1:
        out -= tensor
    return out
