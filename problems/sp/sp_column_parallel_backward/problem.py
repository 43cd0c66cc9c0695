"""Backward of a sequence-parallel column-parallel linear: all-gather the saved input shards,
reduce-scatter the input gradient, each overlapped with a GEMM.

Pattern from Megatron-LM's ``LinearWithGradAccumulationAndAsyncCommunication.backward`` with
sequence parallelism (the backward of ``ColumnParallelLinear``, e.g. the MLP's first GEMM): the
forward all-gathered the sequence shards X_r [S/W, H] but saved only the shard, so the backward
gathers X again, asynchronously, while it computes the input gradient dX = dY @ W_r (a partial
sum over the ranks' output columns, [S, H]); then it reduce-scatters dX along the sequence,
asynchronously, while it computes the weight gradient dW_r = dY^T @ X. Two collectives and two
GEMMs with a fixed dependency chain; how much of the communication hides behind the math
decides the step time. Weights are stored as in Megatron, [N/W, H] (output features first).

Inputs come in two regimes: plain normal values, and the same with three quarters of the rows of
dY and of the hidden columns of W_r and X_r 256 times smaller, so that both outputs hold values of
very different sizes side by side (as gradients do): a transfer that rounds each value to a step
set by its block's largest loses the small ones.
"""

from problems.authoring import mixed_magnitudes, randn, rank_generator

from problems.contract import Cost, ProblemSpec

SPEC = ProblemSpec(
    name="sp_column_parallel_backward",
    category="sp",
    pattern="all-gather overlapped with the dgrad GEMM, reduce-scatter overlapped with the wgrad GEMM",
    origin="Megatron-LM LinearWithGradAccumulationAndAsyncCommunication.backward (ColumnParallelLinear with sequence parallelism)",
    dtype="bfloat16",
    atol=1e-3,
    rtol=2**-8,
    sum_of_products=True,
    regimes=2,
    shapes={"default": {"s": 8192, "hidden": 4096, "n": 28672}, "small": {"s": 64, "hidden": 32, "n": 64}},
    description="Rank r holds the saved forward input shard x_r = X[r*S/W:(r+1)*S/W, :] ([s/world, hidden]), its weight shard "
                "w_r ([n/world, hidden]; the forward computed X @ w_r^T) and the output gradient dy_r ([s, n/world]). Rank r "
                "returns (rows r*S/W..(r+1)*S/W-1 of the sum over ranks of dy_r @ w_r, [s/world, hidden]; dy_r^T @ X, "
                "[n/world, hidden]), where X stacks the input shards of ranks 0..world-1.",
)


PLAIN, MIXED = 0, 1  # regimes


def make_inputs(rank, world, generator, device, dtype, *, s, hidden, n, regime=PLAIN):
    own = rank_generator(generator, rank)
    x = randn((s // world, hidden), own, device, dtype)
    weight = randn((n // world, hidden), own, device, dtype, scale=n**-0.5)
    grad_output = randn((s, n // world), own, device, dtype)
    if regime == MIXED:
        # the hidden columns alike on every rank (the shared generator): dX and dW columns of different sizes
        columns = mixed_magnitudes(x.new_ones(hidden), generator)
        x, weight = x * columns, weight * columns
        grad_output = mixed_magnitudes(grad_output, own, dim=0)
    return x, weight, grad_output


def cost(world, dtype_bytes, *, s, hidden, n):
    full = s * hidden * dtype_bytes
    local_n = n // world
    return Cost(comm_bytes=2 * (world - 1) / world * full, flops=4 * s * local_n * hidden + (world - 1) / world * s * hidden,
                hbm_bytes=(2 * s * local_n + 2 * local_n * hidden) * dtype_bytes + 4 * full + 2 * full / world)
