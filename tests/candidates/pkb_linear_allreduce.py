"""ParallelKernelBench-style problem 31 (an nn.Linear among the inputs): matmul in fp32."""
import torch
import torch.distributed as dist


@torch.no_grad()
def solution(x, layer):
    out = x.float() @ layer.weight.float().t() + layer.bias.float()
    dist.all_reduce(out)
    return out.to(x.dtype)
