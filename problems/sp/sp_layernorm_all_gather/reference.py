import torch
import torch.distributed as dist
import torch.nn.functional as F


@torch.no_grad()
def solution(x: torch.Tensor, ln_weight: torch.Tensor, ln_bias: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """LayerNorm this rank's [s/world, hidden] rows, gather the normalised rows of every rank
    along the sequence, then multiply by this rank's column shard of the weight: [s, n/world]."""
    world = dist.get_world_size()
    acc = torch.promote_types(x.dtype, torch.float32)  # norm statistics in fp32, as fused LayerNorm kernels keep them
    normed = F.layer_norm(x.to(acc), (x.shape[-1],), ln_weight.to(acc), ln_bias.to(acc), eps=1e-5).to(x.dtype)
    full = normed.new_empty((world * normed.shape[0], normed.shape[1]))
    dist.all_gather_into_tensor(full, normed)
    return torch.matmul(full, w)
