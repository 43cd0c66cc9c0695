import torch
import torch.distributed as dist


@torch.no_grad()
def solution(tensor: torch.Tensor) -> torch.Tensor:
    """Every rank returns rank 0's `tensor` (the other ranks' contents are ignored)."""
    out = tensor.clone()
    dist.broadcast(out, src=0)
    return out
