"""Row-parallel linear layer: a local GEMM on a K-shard, then an all-reduce of the partial products.

Pattern from Megatron-LM's ``RowParallelLinear`` in tensor parallelism without sequence
parallelism (the second GEMM of the MLP and the attention output projection), also the
all-reduce that TensorRT-LLM and vLLM fuse into their TP GEMMs. Each rank holds the activations'
columns ``X[:, K/W shard]`` and the matching rows of the weight ``W[K/W shard, :]``; the layer's
output ``X @ W`` is the sum over ranks of the local products, so every rank returns the
all-reduced [M, N] result. The GEMM and the all-reduce can overlap (tile by tile, as in
TensorRT-LLM's and Flux's fused GEMM + all-reduce), which hides most of the communication.

Inputs come in two regimes: plain normal values, and the same with three quarters of them (rows of x_r, columns of w_r) 256 times
smaller (values of very different sizes side by side, as gradients and activations hold): a transfer that
rounds each value to a step set by its block's largest loses the small ones.
"""

from problems.authoring import mixed_magnitudes, randn, rank_generator

from problems.contract import Cost, ProblemSpec

SPEC = ProblemSpec(
    name="gemm_all_reduce",
    category="tp",
    pattern="local GEMM then all-reduce (sum)",
    origin="Megatron-LM RowParallelLinear (tensor parallel, no sequence parallelism); TensorRT-LLM GEMM + all-reduce fusion",
    dtype="bfloat16",
    atol=1e-3,
    rtol=2**-8,
    sum_of_products=True,
    regimes=2,
    shapes={"default": {"m": 4096, "k": 28672, "n": 8192}, "small": {"m": 32, "k": 128, "n": 64}},
    description="Rank r holds x_r = X[:, r*K/W:(r+1)*K/W] ([m, k/world]) and w_r = W[r*K/W:(r+1)*K/W, :] ([k/world, n]); "
                "every rank returns X @ W = sum over ranks of x_r @ w_r, shape [m, n].",
)


PLAIN, MIXED = 0, 1  # regimes


def make_inputs(rank, world, generator, device, dtype, *, m, k, n, regime=PLAIN):
    own = rank_generator(generator, rank)
    x = randn((m, k // world), own, device, dtype)
    w = randn((k // world, n), own, device, dtype, scale=k**-0.5)
    if regime == MIXED:
        x, w = mixed_magnitudes(x, own, dim=0), mixed_magnitudes(w, own, dim=1)
    return x, w


def cost(world, dtype_bytes, *, m, k, n):
    out = m * n * dtype_bytes
    return Cost(comm_bytes=2 * (world - 1) / world * out, flops=2 * m * (k // world) * n + (world - 1) / world * m * n,
                hbm_bytes=(m * k // world + k // world * n) * dtype_bytes + 2 * out)
