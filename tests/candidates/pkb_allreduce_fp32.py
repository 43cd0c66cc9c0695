"""ParallelKernelBench problem 1, torch level: sums in fp32, rounds once."""
import torch
import torch.distributed as dist


@torch.no_grad()
def solution(tensor):
    total = tensor.float()
    dist.all_reduce(total)
    return total.to(tensor.dtype)
