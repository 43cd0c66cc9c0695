import math

import torch
import torch.distributed as dist


@torch.no_grad()
def solution(hparams: torch.Tensor, step: torch.Tensor, *shards: torch.Tensor):
    """Clip the sharded gradients by their global L2 norm, then AdamW on this rank's shards.
    `shards` holds the parameter, gradient, exp_avg and exp_avg_sq shards, in four equal groups.
    Returns the total norm, then the updated parameters, exp_avg and exp_avg_sq shards."""
    lr, beta1, beta2, eps, weight_decay, max_norm = hparams.tolist()
    t = int(step)
    n = len(shards) // 4
    params, grads, exp_avgs, exp_avg_sqs = (shards[i * n:(i + 1) * n] for i in range(4))

    # clip_grad_norm_: the local part of the squared norm, summed over the mesh
    total_sq = torch.stack([torch.linalg.vector_norm(g) for g in grads]).square().sum()
    dist.all_reduce(total_sq, op=dist.ReduceOp.SUM)
    total_norm = total_sq.sqrt()
    clip_coef = torch.clamp(max_norm / (total_norm + 1e-6), max=1.0)

    # AdamW, parameter by parameter
    new_params, new_avgs, new_avg_sqs = [], [], []
    bias_correction1 = 1 - beta1**t
    bias_correction2_sqrt = math.sqrt(1 - beta2**t)
    for param, grad, exp_avg, exp_avg_sq in zip(params, grads, exp_avgs, exp_avg_sqs):
        g = grad * clip_coef
        p = param.mul(1 - lr * weight_decay)
        m = exp_avg.lerp(g, 1 - beta1)
        v = exp_avg_sq.mul(beta2).addcmul_(g, g, value=1 - beta2)
        denom = (v.sqrt() / bias_correction2_sqrt).add_(eps)
        p.addcdiv_(m, denom, value=-lr / bias_correction1)
        new_params.append(p)
        new_avgs.append(m)
        new_avg_sqs.append(v)
    return (total_norm, *new_params, *new_avgs, *new_avg_sqs)
