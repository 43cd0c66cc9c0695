"""ParallelKernelBench-style problem 21 (a list of tensors, plain values, None): norm in fp32."""
import torch
import torch.distributed as dist


@torch.no_grad()
def solution(grads, max_norm, norm_type, group):
    powered = sum(g.float().norm(norm_type) ** norm_type for g in grads)
    dist.all_reduce(powered, group=group)
    total = powered ** (1.0 / norm_type)
    scale = (max_norm / (total + 1e-6)).clamp(max=1.0)
    return [(g.float() * scale).to(g.dtype) for g in grads], total.to(grads[0].dtype)
