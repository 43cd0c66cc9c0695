"""Correct: gathers every rank's buffer and sums locally (a different summation order)."""
import torch
import torch.distributed as dist


@torch.no_grad()
def solution(tensor):
    parts = [torch.empty_like(tensor) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, tensor)
    return torch.stack(parts).sum(dim=0)
