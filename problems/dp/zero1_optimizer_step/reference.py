import math

import torch
import torch.distributed as dist


@torch.no_grad()
def solution(grad, master, exp_avg, exp_avg_sq, hparams, step):
    """ZeRO-1 step. Returns the updated parameters in the model dtype ([numel], all shards), the
    averaged gradient ([numel]) and this rank's updated fp32 master shard and Adam moments."""
    rank, world = dist.get_rank(), dist.get_world_size()
    lr, beta1, beta2, eps, weight_decay = hparams.tolist()
    t = int(step)
    shard = master.numel()

    # 1. data-parallel gradient average: every rank keeps the full gradient
    averaged = grad.clone()
    dist.all_reduce(averaged, op=dist.ReduceOp.AVG)

    # 2. Adam with L2 weight decay on this rank's shard, in the master dtype
    g = averaged[rank * shard:(rank + 1) * shard].to(master.dtype).add(master, alpha=weight_decay)
    m = exp_avg.mul(beta1).add_(g, alpha=1 - beta1)
    v = exp_avg_sq.mul(beta2).addcmul_(g, g, value=1 - beta2)
    denom = (v.sqrt() / math.sqrt(1 - beta2**t)).add_(eps)
    p = master.addcdiv(m, denom, value=-lr / (1 - beta1**t))

    # 3. every rank gets the whole updated model in the model dtype
    params = grad.new_empty(grad.numel())
    dist.all_gather_into_tensor(params, p.to(grad.dtype))
    return params, averaged, p, m, v
