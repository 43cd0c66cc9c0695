"""Data-parallel gradient averaging in buckets: many gradients of different sizes are packed
into flat buckets, each bucket is averaged over the ranks with one all-reduce, and every
gradient comes back as a view of its bucket.

Pattern from PyTorch ``DistributedDataParallel``'s reducer (gradients assigned to buckets of
``bucket_cap_mb`` in reverse parameter order, because backward produces them back to front; each
bucket divided by the world size and all-reduced, with the gradients then viewing the bucket)
and from Megatron-LM's DDP with its contiguous gradient buffer split into buckets. The gradients
here are those of one GPT-style transformer block (layer norms, QKV, attention projection and
MLP weights with biases), from a few KB to tens of MB each, so the buckets mix large matrices
with small vectors. Every rank returns each gradient averaged over all ranks. Bucketing only
changes how the work is cut, not the result: a fast version moves the bytes of all gradients as
one bandwidth-optimal all-reduce without the pack and unpack copies, and needs no per-bucket
launches.

Inputs come in two regimes: plain normal values, and the same with three quarters of them 256 times
smaller (values of very different sizes side by side, as gradients hold): a transfer that rounds
each value to a step set by its block's largest (compressed gradients) loses the small ones.
"""

import math

from problems.authoring import mixed_magnitudes, randn, rank_generator

from problems.contract import Cost, ProblemSpec

SPEC = ProblemSpec(
    name="ddp_bucket_all_reduce_average",
    category="dp",
    pattern="pack gradients into buckets, one all-reduce (average) per bucket, unpack",
    origin="PyTorch DistributedDataParallel reducer buckets (bucket_cap_mb); Megatron-LM DDP contiguous grad-buffer buckets",
    dtype="bfloat16",
    atol=1e-3,
    rtol=2**-8,
    sum_of_products=True,
    regimes=2,
    shapes={"default": {"hidden": 2048, "bucket_cap_mb": 25}, "small": {"hidden": 16, "bucket_cap_mb": 0.003}},
    description="Every rank holds bucket_cap_bytes (0-d int64, the same on every rank) and the 12 gradients of one "
                "transformer block of width hidden, in parameter order: ln1 weight and bias [hidden], qkv weight "
                "[3*hidden, hidden] and bias [3*hidden], attention projection weight [hidden, hidden] and bias [hidden], "
                "ln2 weight and bias [hidden], fc1 weight [4*hidden, hidden] and bias [4*hidden], fc2 weight "
                "[hidden, 4*hidden] and bias [hidden]. Every rank returns the 12 gradients, each averaged over all ranks, "
                "with its own shape.",
)


def _grad_shapes(hidden):
    h = hidden
    return [(h,), (h,), (3 * h, h), (3 * h,), (h, h), (h,), (h,), (h,), (4 * h, h), (4 * h,), (h, 4 * h), (h,)]


PLAIN, MIXED = 0, 1  # regimes


def make_inputs(rank, world, generator, device, dtype, *, hidden, bucket_cap_mb, regime=PLAIN):
    import torch

    own = rank_generator(generator, rank)
    grads = tuple(randn(shape, own, device, dtype, scale=2.0) for shape in _grad_shapes(hidden))
    if regime == MIXED:
        grads = tuple(mixed_magnitudes(grad, own) for grad in grads)
    return (torch.tensor(int(bucket_cap_mb * 2**20), dtype=torch.int64, device=device), *grads)


def cost(world, dtype_bytes, *, hidden, bucket_cap_mb):
    size = sum(math.prod(shape) for shape in _grad_shapes(hidden)) * dtype_bytes
    return Cost(comm_bytes=2 * (world - 1) / world * size, flops=size / dtype_bytes, hbm_bytes=(world + 1) * size)
