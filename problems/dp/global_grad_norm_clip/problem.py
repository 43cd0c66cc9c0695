"""Gradient clipping by the global L2 norm over many gradient tensors spread across ranks,
counting tensor-parallel duplicates once.

Pattern from Megatron-LM's ``clip_grad_norm_fp32`` (``get_grad_norm_fp32`` then
``clip_grad_by_total_norm_fp32``), the step before every optimizer update: each rank holds the
fp32 main gradients of its own parameters, the squared norms of its tensors are summed
(Megatron's fused multi-tensor L2 norm), the sum is all-reduced over the model-parallel group,
and if max_norm / (total_norm + 1e-6) < 1 every gradient is scaled by that factor. The ranks
here are the tensor-parallel ranks of one transformer layer: the QKV, attention-projection and
MLP weights are split across them, while the layer norms and the biases of the row-parallel
layers are replicated, with identical gradients on every rank. Replicated parameters are counted
once (on rank 0), or the norm would count them W times. Their gradients are larger per element
than the weights' (as layer-norm gradients are), so the rule changes the result. Inputs come in
two regimes, clipping active (max_norm at 0.2-0.8 of the expected norm) and not (1.5-3x): a
solution that drops the test and always scales is wrong in the second. One scalar all-reduce sits between two passes over all
gradients; a fast version makes each pass one multi-tensor kernel, keeps the all-reduce of one
number off the host, and reads each gradient as few times as it can.
"""

import math

from problems.authoring import randn, rank_generator

from problems.contract import Cost, ProblemSpec

SPEC = ProblemSpec(
    name="global_grad_norm_clip",
    category="dp",
    pattern="multi-tensor local sum of squares, all-reduce of one scalar, multi-tensor scale",
    origin="Megatron-LM clip_grad_norm_fp32 (get_grad_norm_fp32, clip_grad_by_total_norm_fp32)",
    dtype="float32",
    atol=0.0,
    rtol=1e-5,
    regimes=2,
    shapes={"default": {"hidden": 4096}, "small": {"hidden": 16}},
    description="Rank r holds max_norm (0-d), tp_duplicate ([12], bool: True for parameters replicated on every rank) and "
                "the 12 gradients of its tensor-parallel share of one transformer layer, in order: ln1 weight, ln1 bias "
                "[hidden] (replicated), qkv weight [3*hidden/W, hidden] and bias [3*hidden/W], projection weight "
                "[hidden, hidden/W], projection bias [hidden] (replicated), ln2 weight, ln2 bias [hidden] (replicated), fc1 "
                "weight [4*hidden/W, hidden] and bias [4*hidden/W], fc2 weight [hidden, 4*hidden/W], fc2 bias [hidden] "
                "(replicated). total_norm = sqrt(sum over ranks of the squared L2 norms of the non-replicated gradients, "
                "plus the squared norms of the replicated ones once). Every rank returns total_norm (0-d) and its 12 "
                "gradients, each multiplied by c = max_norm / (total_norm + 1e-6) if c < 1.",
)


def _grads(hidden, world):
    """(shape, replicated) of every gradient of one tensor-parallel rank, in parameter order."""
    h, w = hidden, world
    return [((h,), True), ((h,), True), ((3 * h // w, h), False), ((3 * h // w,), False), ((h, h // w), False),
            ((h,), True), ((h,), True), ((h,), True), ((4 * h // w, h), False), ((4 * h // w,), False),
            ((h, 4 * h // w), False), ((h,), True)]


SHARDED_SCALE, REPLICATED_SCALE = 1e-3, 2e-2  # per element: replicated (layer-norm, bias) gradients are larger


CLIPPING, NOT_CLIPPING = 0, 1  # regimes
MAX_NORM_RANGE = {CLIPPING: (0.2, 0.8), NOT_CLIPPING: (1.5, 3.0)}  # max_norm over the expected total norm


def make_inputs(rank, world, generator, device, dtype, *, hidden, regime=CLIPPING):
    import torch

    layout = _grads(hidden, world)
    replicated = [randn(shape, generator, device, dtype, scale=REPLICATED_SCALE) if dup else None for shape, dup in layout]
    expected_sq = sum((REPLICATED_SCALE**2 if dup else world * SHARDED_SCALE**2) * math.prod(shape) for shape, dup in layout)
    low, high = MAX_NORM_RANGE[regime]
    max_norm = (low + (high - low) * torch.rand((), generator=generator, device=device)) * expected_sq**0.5
    own = rank_generator(generator, rank)
    grads = [rep if dup else randn(shape, own, device, dtype, scale=SHARDED_SCALE) for (shape, dup), rep in zip(layout, replicated)]
    tp_duplicate = torch.tensor([dup for _, dup in layout], dtype=torch.bool, device=device)
    return (max_norm.to(dtype), tp_duplicate, *grads)


def cost(world, dtype_bytes, *, hidden):
    numel = sum(math.prod(shape) for shape, _ in _grads(hidden, world))
    # one pass to take the norm, one to read and write the scaled gradients
    return Cost(comm_bytes=2 * (world - 1) / world * 4, flops=3 * numel, hbm_bytes=3 * numel * dtype_bytes)
