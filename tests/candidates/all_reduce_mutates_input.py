"""Right values, but reduces in place into its input."""
import torch
import torch.distributed as dist


@torch.no_grad()
def solution(tensor):
    dist.all_reduce(tensor)
    return tensor.clone()
