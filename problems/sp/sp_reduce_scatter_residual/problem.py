"""Reduce-scatter of a row-parallel linear's partial output along the sequence, then bias,
residual add and RMSNorm on the rank's sequence shard.

Pattern from the end of a transformer sublayer under Megatron-LM sequence parallelism: the
attention output projection (``RowParallelLinear``) leaves every rank a partial [S, H] sum; it
is reduce-scattered along the sequence (``reduce_scatter_to_sequence_parallel_region``), and on
its [S/W, H] shard each rank adds the projection bias and the residual stream (the
bias-dropout-add, dropout off) and applies the next block's RMSNorm. The sublayer returns both
the new residual stream and the normalised activations. TensorRT-LLM and FlashInfer fuse the
same epilogue into the communication kernel (all-reduce + residual + RMSNorm); here the
reduce-scatter variant. The GEMM is left out (that is ``gemm_reduce_scatter``): the work is one
pass over the partial sums. A fast version reduces each peer's block as it arrives and
normalises it in registers instead of round-tripping the sum through HBM three times.
"""

from problems.authoring import randn, rank_generator

from problems.contract import Cost, ProblemSpec

SPEC = ProblemSpec(
    name="sp_reduce_scatter_residual",
    category="sp",
    pattern="reduce-scatter along the sequence, then bias + residual add + RMSNorm on the shard",
    origin="Megatron-LM sequence parallelism (RowParallelLinear reduce-scatter, bias-dropout-add, RMSNorm); "
           "TensorRT-LLM / FlashInfer fused all-reduce + residual + RMSNorm",
    dtype="bfloat16",
    atol=1e-3,
    rtol=2**-8,
    shapes={"default": {"s": 8192, "hidden": 8192}, "small": {"s": 64, "hidden": 64}},
    description="Rank r holds partial_r ([s, hidden]; the layer output is P = the sum over ranks of partial_r), the bias "
                "([hidden], the same on every rank), its residual shard ([s/world, hidden], rows r*s/world..(r+1)*s/world-1) "
                "and the RMSNorm weight ([hidden], the same on every rank). With P_r those rows of P, rank r returns "
                "h = P_r + bias + residual (in the input dtype) and RMSNorm(h) = h / sqrt(mean(h^2 over hidden) + 1e-6) "
                "* weight (computed in fp32 or wider, returned in the input dtype), each [s/world, hidden].",
)


def make_inputs(rank, world, generator, device, dtype, *, s, hidden):
    bias = randn(hidden, generator, device, dtype, scale=0.5)  # shared: every rank holds the same parameters
    norm_weight = randn(hidden, generator, device, dtype, scale=0.1, mean=1.0)
    own = rank_generator(generator, rank)
    partial = randn((s, hidden), own, device, dtype)
    residual = randn((s // world, hidden), own, device, dtype, scale=2.0)
    return partial, bias, residual, norm_weight


def cost(world, dtype_bytes, *, s, hidden):
    size = s * hidden * dtype_bytes
    shard = size / world
    return Cost(comm_bytes=(world - 1) / world * size, flops=(world - 1) / world * s * hidden + 6 * s // world * hidden,
                hbm_bytes=size + 3 * shard)
