"""Reduce-scatter (sum) over rows: rank r returns the sum over ranks of row block r.

Pattern from Megatron-LM's sequence parallelism, which reduce-scatters the partial outputs of a
row-parallel linear layer along the sequence, and from ZeRO-2 / PyTorch FSDP, which
reduce-scatter gradients so each rank keeps only the shard it updates. Every rank holds a
[tokens, hidden] buffer; rank r returns rows [r * tokens / W, (r + 1) * tokens / W) summed over
all ranks. A rank must send W-1 of its W row blocks away at the least, half the traffic of an
all-reduce of the same buffer.

Inputs come in two regimes: plain normal values, and the same with three quarters of them 256 times
smaller (values of very different sizes side by side, as gradients and activations hold): a transfer that
rounds each value to a step set by its block's largest loses the small ones.
"""

from problems.authoring import mixed_magnitudes, randn, rank_generator

from problems.contract import Cost, ProblemSpec

SPEC = ProblemSpec(
    name="reduce_scatter",
    category="collective",
    pattern="reduce-scatter (sum, along dim 0)",
    origin="Megatron-LM sequence-parallel reduce-scatter / ZeRO-2 and FSDP gradient reduce-scatter",
    dtype="bfloat16",
    atol=1e-3,
    rtol=2**-8,
    sum_of_products=True,
    regimes=2,
    shapes={"default": {"tokens": 8192, "hidden": 4096}, "small": {"tokens": 64, "hidden": 64}},
    description="Each rank holds a [tokens, hidden] tensor; rank r returns the element-wise sum over ranks of row block r, "
                "shape [tokens/world, hidden].",
)


PLAIN, MIXED = 0, 1  # regimes


def make_inputs(rank, world, generator, device, dtype, *, tokens, hidden, regime=PLAIN):
    own = rank_generator(generator, rank)
    x = randn((tokens, hidden), own, device, dtype, scale=2.0)
    return (mixed_magnitudes(x, own) if regime == MIXED else x,)


def cost(world, dtype_bytes, *, tokens, hidden):
    size = tokens * hidden * dtype_bytes
    return Cost(comm_bytes=(world - 1) / world * size, flops=(world - 1) / world * tokens * hidden, hbm_bytes=size + size / world)
