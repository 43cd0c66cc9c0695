import torch
import torch.distributed as dist
import torch.nn.functional as F


@torch.no_grad()
def solution(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """Centred depthwise convolution along the sequence of this rank's [batch, seq/world,
    channels] chunk, with halo rows from the neighbouring ranks (zeros at the sequence ends)."""
    rank, world = dist.get_rank(), dist.get_world_size()
    batch, rows, channels = x.shape
    halo = (weight.shape[1] - 1) // 2
    left = x.new_zeros((batch, halo, channels))  # the previous rank's last rows
    right = x.new_zeros((batch, halo, channels))  # the next rank's first rows
    ops = []
    if rank > 0:
        ops += [dist.P2POp(dist.isend, x[:, :halo].contiguous(), rank - 1), dist.P2POp(dist.irecv, left, rank - 1)]
    if rank + 1 < world:
        ops += [dist.P2POp(dist.isend, x[:, rows - halo:].contiguous(), rank + 1), dist.P2POp(dist.irecv, right, rank + 1)]
    if ops:
        for request in dist.batch_isend_irecv(ops):
            request.wait()
    padded = torch.cat((left, x, right), dim=1).transpose(1, 2)  # [batch, channels, rows + 2 * halo]
    out = F.conv1d(padded, weight.unsqueeze(1), bias, groups=channels)
    return out.transpose(1, 2).contiguous()
