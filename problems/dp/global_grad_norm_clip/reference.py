import torch
import torch.distributed as dist


@torch.no_grad()
def solution(max_norm: torch.Tensor, tp_duplicate: torch.Tensor, *grads: torch.Tensor):
    """Clip this rank's gradients by the global L2 norm over all ranks' gradients, replicated
    gradients counted once. Returns the total norm (before clipping) and the clipped gradients."""
    rank = dist.get_rank()
    acc = torch.promote_types(grads[0].dtype, torch.float32)

    # squared norm of what this rank owns; a replicated gradient is counted on rank 0 only
    counted = [g for g, duplicate in zip(grads, tp_duplicate.tolist()) if not duplicate or rank == 0]
    local_sq = torch.zeros((), dtype=acc, device=grads[0].device)
    for g in counted:
        local_sq += torch.linalg.vector_norm(g, dtype=acc) ** 2
    dist.all_reduce(local_sq, op=dist.ReduceOp.SUM)
    total_norm = local_sq.sqrt()

    clip_coeff = float(max_norm) / (float(total_norm) + 1.0e-6)
    if clip_coeff < 1.0:
        return (total_norm, *(g * clip_coeff for g in grads))
    return (total_norm, *(g.clone() for g in grads))
