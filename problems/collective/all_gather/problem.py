"""All-gather of sequence shards: every rank receives every rank's rows, stacked in rank order.

Pattern from Megatron-LM's sequence parallelism, which all-gathers the sequence-sharded
activations (LayerNorm output) before each column-parallel linear layer, and from ZeRO-3 /
PyTorch FSDP, which gather a layer's flat parameter shards just before the layer runs. Each rank
contributes ``tokens / world`` rows of width ``hidden``; every rank returns all ``tokens`` rows.
It is pure data movement, so the output must be bit-exact. A rank must send its shard to W-1
peers at the least; writing straight into peers' output buffers (or NVLink multicast) avoids the
staging copies and the W-1 dependent steps of a ring.
"""

from problems.authoring import randn, rank_generator

from problems.contract import Cost, ProblemSpec

SPEC = ProblemSpec(
    name="all_gather",
    category="collective",
    pattern="all-gather (concatenate along dim 0)",
    origin="Megatron-LM sequence-parallel activation all-gather / ZeRO-3 and FSDP parameter all-gather",
    dtype="bfloat16",
    atol=0.0,
    rtol=0.0,
    shapes={"default": {"tokens": 8192, "hidden": 4096}, "small": {"tokens": 64, "hidden": 64}},
    description="Each rank holds a [tokens/world, hidden] shard; every rank returns the [tokens, hidden] concatenation "
                "of the shards of ranks 0..world-1.",
)


def make_inputs(rank, world, generator, device, dtype, *, tokens, hidden):
    return (randn((tokens // world, hidden), rank_generator(generator, rank), device, dtype),)


def cost(world, dtype_bytes, *, tokens, hidden):
    size = tokens * hidden * dtype_bytes
    return Cost(comm_bytes=(world - 1) / world * size, hbm_bytes=size / world + size)
