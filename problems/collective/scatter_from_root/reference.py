import torch
import torch.distributed as dist


@torch.no_grad()
def solution(full: torch.Tensor) -> torch.Tensor:
    """Rank 0 splits its [rows, hidden] tensor into world row blocks and sends block r to rank r;
    every rank returns its block, [rows/world, hidden] (the other ranks' inputs are ignored)."""
    rank, world = dist.get_rank(), dist.get_world_size()
    out = full.new_empty((full.shape[0] // world, *full.shape[1:]))
    blocks = [block.contiguous() for block in full.chunk(world)] if rank == 0 else None
    dist.scatter(out, blocks, src=0)
    return out
