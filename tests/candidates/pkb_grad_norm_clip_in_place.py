"""Scales the gradients of the list it was given in place: modifies its inputs."""
import torch
import torch.distributed as dist


@torch.no_grad()
def solution(grads, max_norm, norm_type, group):
    powered = sum(g.float().norm(norm_type) ** norm_type for g in grads)
    dist.all_reduce(powered, group=group)
    total = powered ** (1.0 / norm_type)
    scale = (max_norm / (total + 1e-6)).clamp(max=1.0)
    for g in grads:
        g.mul_(scale.to(g.dtype))
    return list(grads), total.to(grads[0].dtype)
