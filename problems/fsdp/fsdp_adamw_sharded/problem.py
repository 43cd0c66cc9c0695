"""Sharded optimizer step of FSDP2: clip the gradients by their global norm, then AdamW, all on
each rank's dim-0 shards of the parameters.

Pattern from a torchtitan / PyTorch FSDP2 training step: every parameter is a DTensor sharded on
dim 0, so each rank holds an fp32 shard of each parameter, of its gradient (already
reduce-scattered) and of both AdamW moments. ``torch.nn.utils.clip_grad_norm_`` sums the squares
of the local shards, all-reduces the sum (the DTensor norm is a partial sum over the mesh) and
scales every gradient by min(1, max_norm / (total_norm + 1e-6)); then ``torch.optim.AdamW``
updates each shard with decoupled weight decay and bias-corrected moments. No parameter is ever
gathered. The parameters are those of a Llama-style SwiGLU MLP and its RMSNorm weight.
Hyper-parameters (the clipping threshold among them) and the step count come with the inputs and
differ per call; the threshold is drawn so that 3 calls in 5 clip. fp32 throughout, judged
against an fp64 run. A scalar all-reduce separates a read of every gradient from a
read-modify-write of four tensors per parameter; a fast version fuses everything after the
all-reduce into one multi-tensor pass and makes the norm pass one kernel.
"""

import math

from problems.authoring import randn, rank_generator

from problems.contract import Cost, ProblemSpec

SPEC = ProblemSpec(
    name="fsdp_adamw_sharded",
    category="fsdp",
    pattern="local sum of squares over sharded gradients, scalar all-reduce, clip, multi-tensor AdamW on the shards",
    origin="torchtitan FSDP2 training step: torch.nn.utils.clip_grad_norm_ on DTensor gradients, then torch.optim.AdamW",
    dtype="float32",
    atol=0.0,
    rtol=1e-5,
    shapes={"default": {"hidden": 2048, "ffn": 8192}, "small": {"hidden": 16, "ffn": 32}},
    description="The model's parameters are w1 [ffn, hidden], w2 [hidden, ffn], w3 [ffn, hidden] and norm [hidden], each "
                "sharded on dim 0: rank r holds rows r*d0/W..(r+1)*d0/W-1. Rank r holds hparams ([lr, beta1, beta2, eps, "
                "weight_decay, max_norm]) and step (0-d int64, t >= 1), the same on every rank, then the 4 parameter "
                "shards, the 4 gradient shards, the 4 exp_avg shards and the 4 exp_avg_sq shards (fp32, in that parameter "
                "order). With total_norm = the L2 norm of all gradients over all ranks and g = grad * min(1, max_norm / "
                "(total_norm + 1e-6)): m = beta1*exp_avg + (1-beta1)*g, v = beta2*exp_avg_sq + (1-beta2)*g^2, "
                "p = param*(1 - lr*weight_decay) - lr/(1-beta1^t) * m / (sqrt(v)/sqrt(1-beta2^t) + eps). Rank r returns "
                "total_norm (0-d), then its 4 p, 4 m and 4 v shards.",
)

GRAD_SCALE = 1e-3


def _param_shapes(hidden, ffn):
    return [(ffn, hidden), (hidden, ffn), (ffn, hidden), (hidden,)]


def make_inputs(rank, world, generator, device, dtype, *, hidden, ffn):
    import torch

    u = torch.rand(7, generator=generator, device=device, dtype=torch.float64)  # shared
    hparams = torch.stack((10 ** (-4 + u[0]), 0.85 + 0.1 * u[1], 0.95 + 0.049 * u[2], 10 ** (-8 + 2 * u[3]), 0.1 * u[4]))
    step = (1 + 300 * u[5]).to(torch.int64)
    numel = sum(math.prod(shape) for shape in _param_shapes(hidden, ffn))
    max_norm = (0.25 + 1.25 * u[6]) * GRAD_SCALE * numel**0.5  # clips in 3 calls out of 5
    hparams = torch.cat((hparams, max_norm.view(1)))
    own = rank_generator(generator, rank)
    shards = [(shape[0] // world, *shape[1:]) for shape in _param_shapes(hidden, ffn)]
    params = [randn(shape, own, device, dtype, scale=0.02) for shape in shards]
    grads = [randn(shape, own, device, dtype, scale=GRAD_SCALE) for shape in shards]
    exp_avgs = [randn(shape, own, device, dtype, scale=GRAD_SCALE / 4) for shape in shards]
    exp_avg_sqs = [(torch.rand(shape, generator=own, device=device) + 0.5).mul(GRAD_SCALE**2).to(dtype) for shape in shards]
    return (hparams.to(dtype), step, *params, *grads, *exp_avgs, *exp_avg_sqs)


def cost(world, dtype_bytes, *, hidden, ffn):
    shard = sum(math.prod(shape) for shape in _param_shapes(hidden, ffn)) // world
    # read the gradients for the norm, then read param, grad, m, v and write param, m, v
    return Cost(comm_bytes=2 * (world - 1) / world * 4, flops=20 * shard, hbm_bytes=8 * shard * dtype_bytes)
