import math

import torch
import torch.distributed as dist


@torch.no_grad()
def solution(grad, grad_acc, master, exp_avg, exp_avg_sq, hparams, step):
    """ZeRO-2 step after the last micro-batch. Returns the updated parameters in the model dtype
    ([numel], all shards) and this rank's updated fp32 master shard and AdamW moments."""
    world = dist.get_world_size()
    lr, beta1, beta2, eps, weight_decay = hparams.tolist()
    t = int(step)
    shard = master.numel()

    # 1. this rank's shard of the micro-batch gradient, averaged over ranks, into the fp32 partition
    reduced = grad.new_empty(shard)
    dist.reduce_scatter_tensor(reduced, grad, op=dist.ReduceOp.AVG)
    g = grad_acc + reduced.to(grad_acc.dtype)

    # 2. AdamW on the shard
    p = master.mul(1 - lr * weight_decay)
    m = exp_avg.mul(beta1).add_(g, alpha=1 - beta1)
    v = exp_avg_sq.mul(beta2).addcmul_(g, g, value=1 - beta2)
    denom = (v.sqrt() / math.sqrt(1 - beta2**t)).add_(eps)
    p.addcdiv_(m, denom, value=-lr / (1 - beta1**t))

    # 3. every rank gets the whole updated model in the model dtype
    params = grad.new_empty(shard * world)
    dist.all_gather_into_tensor(params, p.to(grad.dtype))
    return params, p, m, v
