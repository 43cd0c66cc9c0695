"""All-reduce (sum) of one bf16 buffer per rank.

Pattern from Megatron-LM's data-parallel gradient all-reduce (``DistributedDataParallel`` with
contiguous grad buffers) and the tensor-parallel activation all-reduce after row-parallel
layers: every rank holds a buffer of the same shape and receives the element-wise sum.
Bandwidth-optimal algorithms move 2 (W-1)/W of the buffer per rank (reduce-scatter then
all-gather); one-shot algorithms trade bandwidth for latency on small buffers.

Inputs come in two regimes: plain normal values, and the same with three quarters of them 256 times
smaller (values of very different sizes side by side, as gradients and activations hold): a transfer that
rounds each value to a step set by its block's largest loses the small ones.
"""

from problems.authoring import mixed_magnitudes, randn, rank_generator

from problems.contract import Cost, ProblemSpec

SPEC = ProblemSpec(
    name="all_reduce",
    category="collective",
    pattern="all-reduce (sum)",
    origin="Megatron-LM DDP grad-buffer all-reduce / TP row-parallel output all-reduce",
    dtype="bfloat16",
    atol=1e-3,
    rtol=2**-8,
    sum_of_products=True,
    regimes=2,
    shapes={"default": {"numel": 32 * 2**20}, "small": {"numel": 12_288}, "latency": {"numel": 64 * 1024}},
    description="Each rank holds a 1-D tensor of `numel` elements; every rank returns the element-wise sum over ranks.",
)


PLAIN, MIXED = 0, 1  # regimes


def make_inputs(rank, world, generator, device, dtype, *, numel, regime=PLAIN):
    own = rank_generator(generator, rank)
    x = randn(numel, own, device, dtype, scale=4.0)
    return (mixed_magnitudes(x, own) if regime == MIXED else x,)


def cost(world, dtype_bytes, *, numel):
    size = numel * dtype_bytes
    return Cost(comm_bytes=2 * (world - 1) / world * size, hbm_bytes=(world + 1) * size)
