"""ParallelKernelBench-style problem 7: reduce-scatter through an all-reduce in fp32."""
import torch
import torch.distributed as dist


@torch.no_grad()
def solution(tensor):
    total = tensor.float()
    dist.all_reduce(total)
    return total.chunk(dist.get_world_size())[dist.get_rank()].to(tensor.dtype)
