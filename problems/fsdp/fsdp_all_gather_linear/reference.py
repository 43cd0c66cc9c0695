import torch
import torch.distributed as dist
import torch.nn.functional as F


@torch.no_grad()
def solution(x: torch.Tensor, flat_shard: torch.Tensor) -> torch.Tensor:
    """Unshard the flat parameter (weight [out, in] then bias [out]) from every rank's shard, then
    apply the linear layer to this rank's tokens: returns [tokens, out_features]."""
    world = dist.get_world_size()
    flat = flat_shard.new_empty(world * flat_shard.numel())
    dist.all_gather_into_tensor(flat, flat_shard)
    in_features = x.shape[-1]
    out_features = flat.numel() // (in_features + 1)
    weight = flat[:out_features * in_features].view(out_features, in_features)
    bias = flat[out_features * in_features:]
    return F.linear(x, weight, bias)
