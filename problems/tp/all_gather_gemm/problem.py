"""Sequence-parallel column-parallel linear: all-gather the sequence shards, then a local GEMM.

Pattern from Megatron-LM's ``ColumnParallelLinear`` with sequence parallelism (the first GEMM of
the MLP and the QKV projection): activations between layers are split along the sequence, so
each rank first all-gathers the full sequence ``X`` [S, K] from its [S/W, K] shard, then
multiplies by its own column shard of the weight, ``W[:, N/W shard]``. Every rank returns its
[S, N/W] slice of ``X @ W``. The GEMM can start on the local shard while the others are still
arriving (Megatron's and TransformerEngine's userbuffers overlap, Flux's fused all-gather
GEMM), so a good kernel hides the all-gather behind the math.
"""

from problems.authoring import randn, rank_generator

from problems.contract import Cost, ProblemSpec

SPEC = ProblemSpec(
    name="all_gather_gemm",
    category="tp",
    pattern="all-gather along the sequence then local GEMM",
    origin="Megatron-LM ColumnParallelLinear with sequence parallelism; TransformerEngine userbuffers all-gather overlap",
    dtype="bfloat16",
    atol=1e-3,
    rtol=2**-8,
    shapes={"default": {"s": 4096, "k": 8192, "n": 28672}, "small": {"s": 32, "k": 64, "n": 128}},
    description="Rank r holds x_r = X[r*S/W:(r+1)*S/W, :] ([s/world, k]) and w_r = W[:, r*N/W:(r+1)*N/W] ([k, n/world]); "
                "every rank returns X @ w_r, shape [s, n/world], where X stacks the shards of ranks 0..world-1.",
)


def make_inputs(rank, world, generator, device, dtype, *, s, k, n):
    own = rank_generator(generator, rank)
    x = randn((s // world, k), own, device, dtype)
    w = randn((k, n // world), own, device, dtype, scale=k**-0.5)
    return x, w


def cost(world, dtype_bytes, *, s, k, n):
    gathered = s * k * dtype_bytes
    return Cost(comm_bytes=(world - 1) / world * gathered, flops=2 * s * k * (n // world),
                hbm_bytes=gathered / world + 2 * gathered + (k * (n // world) + s * (n // world)) * dtype_bytes)
