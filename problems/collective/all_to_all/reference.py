import torch
import torch.distributed as dist


@torch.no_grad()
def solution(tensor: torch.Tensor) -> torch.Tensor:
    """Send row block j of `tensor` to rank j; return the blocks received, in source-rank order."""
    out = torch.empty_like(tensor)
    dist.all_to_all_single(out, tensor.contiguous())
    return out
