"""ParallelKernelBench-style problem 55 (a process group made by the input generator)."""
import torch
import torch.distributed as dist


@torch.no_grad()
def solution(x, group):
    out = x.float()
    dist.all_reduce(out, group=group)
    return out.to(x.dtype)
