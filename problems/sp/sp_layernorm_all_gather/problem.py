"""Sequence-parallel LayerNorm, all-gather along the sequence, then a column-parallel linear.

Pattern from Megatron-LM's sequence parallelism (Korthikanti et al., "Reducing Activation
Recomputation in Large Transformer Models"): between tensor-parallel blocks the activations are
split along the sequence, so the LayerNorm, whose weights every rank holds, runs only on the
rank's own [S/W, H] rows. Its output, in the activation dtype, is then all-gathered along the
sequence by the column-parallel linear that follows (``ColumnParallelLinear``, whose
``LinearWithGradAccumulationAndAsyncCommunication`` gathers its input when sequence
parallelism is on; here the fused gate+up projection of a SwiGLU MLP), and multiplied by the
rank's columns of the weight. Rank r returns its [S, N/W] slice of LayerNorm(X) @ W. The norm
is cheap but costs a pass over memory, and the gather blocks the GEMM: a fast version
normalises rows straight into the peers' gather buffers and starts the GEMM on the row blocks
that have arrived.
"""

from problems.authoring import randn, rank_generator

from problems.contract import Cost, ProblemSpec

SPEC = ProblemSpec(
    name="sp_layernorm_all_gather",
    category="sp",
    pattern="local LayerNorm, all-gather along the sequence, local GEMM",
    origin="Megatron-LM sequence parallelism (LayerNorm on the sequence shard, then ColumnParallelLinear's input "
           "all-gather along the sequence)",
    dtype="bfloat16",
    atol=1e-3,
    rtol=2**-8,
    shapes={"default": {"s": 8192, "hidden": 4096, "n": 28672}, "small": {"s": 64, "hidden": 64, "n": 128}},
    description="Rank r holds x_r = X[r*S/W:(r+1)*S/W, :] ([s/world, hidden]), the LayerNorm weight and bias ([hidden], the "
                "same on every rank; eps 1e-5, statistics in fp32 or wider, output cast back to x's dtype) and "
                "w_r = W[:, r*N/W:(r+1)*N/W] ([hidden, n/world]); every rank returns LayerNorm(X) @ w_r, shape "
                "[s, n/world], where X stacks the shards of ranks 0..world-1.",
)


def make_inputs(rank, world, generator, device, dtype, *, s, hidden, n):
    ln_weight = randn(hidden, generator, device, dtype, scale=0.1, mean=1.0)  # shared: the norm is replicated
    ln_bias = randn(hidden, generator, device, dtype, scale=0.1)
    own = rank_generator(generator, rank)
    x = randn((s // world, hidden), own, device, dtype, scale=2.0, mean=0.5)
    w = randn((hidden, n // world), own, device, dtype, scale=hidden**-0.5)
    return x, ln_weight, ln_bias, w


def cost(world, dtype_bytes, *, s, hidden, n):
    gathered = s * hidden * dtype_bytes
    local_n = n // world
    return Cost(comm_bytes=(world - 1) / world * gathered, flops=2 * s * hidden * local_n + 8 * s // world * hidden,
                hbm_bytes=2 * gathered / world + 2 * gathered + (hidden * local_n + s * local_n) * dtype_bytes)
