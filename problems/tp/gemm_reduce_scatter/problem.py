"""Sequence-parallel row-parallel linear: a local GEMM on a K-shard, then a reduce-scatter over rows.

Pattern from Megatron-LM's ``RowParallelLinear`` with sequence parallelism (the second GEMM of
the MLP and the attention output projection): each rank holds the full sequence of the
activations' K-shard, ``X[:, K/W shard]`` [S, K/W], and the matching weight rows
``W[K/W shard, :]`` [K/W, N]. The partial products are summed over ranks and scattered along
the sequence, so rank r returns rows [r*S/W, (r+1)*S/W) of ``X @ W``. Computing the row block
bound for each peer first and sending it while the next block is computed (TransformerEngine's
userbuffers, Flux's fused GEMM + reduce-scatter) hides the communication.

Inputs come in two regimes: plain normal values, and the same with three quarters of them (rows of x_r, columns of w_r) 256 times
smaller (values of very different sizes side by side, as gradients and activations hold): a transfer that
rounds each value to a step set by its block's largest loses the small ones.
"""

from problems.authoring import mixed_magnitudes, randn, rank_generator

from problems.contract import Cost, ProblemSpec

SPEC = ProblemSpec(
    name="gemm_reduce_scatter",
    category="tp",
    pattern="local GEMM then reduce-scatter (sum) along the sequence",
    origin="Megatron-LM RowParallelLinear with sequence parallelism; TransformerEngine userbuffers reduce-scatter overlap",
    dtype="bfloat16",
    atol=1e-3,
    rtol=2**-8,
    sum_of_products=True,
    regimes=2,
    shapes={"default": {"s": 4096, "k": 28672, "n": 8192}, "small": {"s": 64, "k": 128, "n": 32}},
    description="Rank r holds x_r = X[:, r*K/W:(r+1)*K/W] ([s, k/world]) and w_r = W[r*K/W:(r+1)*K/W, :] ([k/world, n]); "
                "rank r returns rows r*s/world..(r+1)*s/world of X @ W = sum over ranks of x_r @ w_r, shape [s/world, n].",
)


PLAIN, MIXED = 0, 1  # regimes


def make_inputs(rank, world, generator, device, dtype, *, s, k, n, regime=PLAIN):
    own = rank_generator(generator, rank)
    x = randn((s, k // world), own, device, dtype)
    w = randn((k // world, n), own, device, dtype, scale=k**-0.5)
    if regime == MIXED:
        x, w = mixed_magnitudes(x, own, dim=0), mixed_magnitudes(w, own, dim=1)
    return x, w


def cost(world, dtype_bytes, *, s, k, n):
    partial = s * n * dtype_bytes
    return Cost(comm_bytes=(world - 1) / world * partial, flops=2 * s * (k // world) * n + (world - 1) / world * s * n,
                hbm_bytes=(s * k // world + k // world * n) * dtype_bytes + partial + partial / world)
