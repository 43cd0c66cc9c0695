"""FSDP forward of a linear layer: all-gather the flat-sharded parameters, then the GEMM.

Pattern from PyTorch FSDP (``FullyShardedDataParallel`` with its ``FlatParameter``) and
DeepSpeed ZeRO stage 3: a module's parameters, here the weight [out, in] and bias [out] of one
linear layer, are flattened and concatenated into one flat parameter, which is split into W
equal contiguous shards, one per rank. Before the forward pass every rank all-gathers the flat
parameter, views the weight and bias in it and applies the layer to its own micro-batch; the
gathered parameter is freed afterwards. The shapes are those of a Llama-style MLP up-projection
with bias, chosen so the flat parameter needs no padding at any declared world size. Every rank
returns x @ weight^T + bias for its own tokens. At the default shape the gather (about 100 MB
into each rank) costs a fifth to a quarter of the GEMM's time; FSDP hides it by prefetching the
next layer's gather during this layer's compute, and a fast version hides it within the layer by
starting the GEMM on the shards that have arrived (the local one first) while the others are
still in flight.
"""

from problems.authoring import randn, rank_generator

from problems.contract import Cost, ProblemSpec

SPEC = ProblemSpec(
    name="fsdp_all_gather_linear",
    category="fsdp",
    pattern="all-gather of a flat parameter shard, then a local GEMM with bias",
    origin="PyTorch FSDP FlatParameter forward (unshard, then compute); DeepSpeed ZeRO stage 3 parameter gather",
    dtype="bfloat16",
    atol=1e-3,
    rtol=2**-8,
    shapes={"default": {"tokens": 8192, "in_features": 4096, "out_features": 14336},
            "small": {"tokens": 32, "in_features": 64, "out_features": 128}},
    description="The flat parameter is weight ([out_features, in_features], row-major) followed by bias ([out_features]), "
                "numel (in_features + 1) * out_features; rank r holds x ([tokens, in_features], its own tokens) and "
                "flat_shard, elements r*numel/W..(r+1)*numel/W-1 of the flat parameter. Every rank returns "
                "x @ weight^T + bias, shape [tokens, out_features].",
)


def make_inputs(rank, world, generator, device, dtype, *, tokens, in_features, out_features):
    own = rank_generator(generator, rank)
    x = randn((tokens, in_features), own, device, dtype)
    flat_shard = randn(((in_features + 1) * out_features // world,), own, device, dtype, scale=in_features**-0.5)
    return x, flat_shard


def cost(world, dtype_bytes, *, tokens, in_features, out_features):
    flat = (in_features + 1) * out_features * dtype_bytes
    return Cost(comm_bytes=(world - 1) / world * flat, flops=2 * tokens * in_features * out_features + tokens * out_features,
                hbm_bytes=2 * flat + (tokens * in_features + tokens * out_features) * dtype_bytes)
