import torch
import torch.distributed as dist


@torch.no_grad()
def solution(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """Row-parallel linear: this rank's partial product x @ w, summed over all ranks."""
    out = torch.matmul(x, w)
    dist.all_reduce(out, op=dist.ReduceOp.SUM)
    return out
