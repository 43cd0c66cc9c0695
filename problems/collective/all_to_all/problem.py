"""All-to-all with equal splits: row block j of rank i becomes row block i of rank j.

Pattern from capacity-based mixture-of-experts layers (GShard, DeepSpeed-MoE's ``_AllToAll``
around the expert computation, Megatron-LM's all-to-all token dispatcher with a capacity
factor): every rank holds ``tokens`` rows split into W equal blocks, block j destined for rank
j, and receives one block from every rank, stacked in source-rank order. A transpose of the rank
dimension; pure data movement, so the output must be bit-exact. Each rank sends (W-1)/W of its
buffer; NVSwitch lets all W-1 transfers run at once.
"""

from problems.authoring import randn, rank_generator

from problems.contract import Cost, ProblemSpec

SPEC = ProblemSpec(
    name="all_to_all",
    category="collective",
    pattern="all-to-all, equal splits along dim 0",
    origin="DeepSpeed-MoE / GShard capacity-based expert all-to-all (Megatron-LM all-to-all token dispatcher)",
    dtype="bfloat16",
    atol=0.0,
    rtol=0.0,
    shapes={"default": {"tokens": 8192, "hidden": 4096}, "small": {"tokens": 64, "hidden": 64}},
    description="Each rank holds [tokens, hidden], split along dim 0 into world equal blocks; block j goes to rank j. "
                "Every rank returns [tokens, hidden]: block i is the block that rank i addressed to it.",
)


def make_inputs(rank, world, generator, device, dtype, *, tokens, hidden):
    return (randn((tokens, hidden), rank_generator(generator, rank), device, dtype),)


def cost(world, dtype_bytes, *, tokens, hidden):
    size = tokens * hidden * dtype_bytes
    return Cost(comm_bytes=(world - 1) / world * size, hbm_bytes=2 * size)
