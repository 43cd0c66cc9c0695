import torch
import torch.distributed as dist

_MESH_GROUPS = {}  # (world, tp) -> (TP groups, FSDP groups), built once


def _mesh_groups(world: int, tp: int):
    """Every rank builds every sub-group, in the same order: the TP groups (consecutive ranks),
    then the FSDP groups (ranks with the same TP index)."""
    if (world, tp) not in _MESH_GROUPS:
        dp = world // tp
        tp_groups = [dist.new_group(list(range(d * tp, (d + 1) * tp))) for d in range(dp)]
        dp_groups = [dist.new_group(list(range(t, world, tp))) for t in range(tp)]
        _MESH_GROUPS[(world, tp)] = (tp_groups, dp_groups)
    return _MESH_GROUPS[(world, tp)]


@torch.no_grad()
def solution(x: torch.Tensor, weight_shard: torch.Tensor, tp_size: torch.Tensor) -> torch.Tensor:
    """Column-parallel linear on a dp x tp mesh: gather this TP rank's weight block from the FSDP
    group and the whole sequence from the TP group, then multiply: [tokens, out_features / tp]."""
    rank, world = dist.get_rank(), dist.get_world_size()
    tp = int(tp_size)
    dp = world // tp
    tp_groups, dp_groups = _mesh_groups(world, tp)

    # FSDP: unshard this TP rank's block of weight rows
    block = weight_shard.new_empty((dp * weight_shard.shape[0], weight_shard.shape[1]))
    dist.all_gather_into_tensor(block, weight_shard.contiguous(), group=dp_groups[rank % tp])
    # sequence parallel -> column parallel: the whole sequence of this FSDP rank's batch
    sequence = x.new_empty((tp * x.shape[0], x.shape[1]))
    dist.all_gather_into_tensor(sequence, x.contiguous(), group=tp_groups[rank // tp])
    return torch.matmul(sequence, block.t())
