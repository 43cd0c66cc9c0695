"""Broadcast from rank 0: every rank returns rank 0's tensor.

Pattern from PyTorch DistributedDataParallel, which broadcasts rank 0's parameters and buffers
to all ranks when a model is wrapped, and from RL post-training systems (OpenRLHF, verl), which
broadcast freshly trained weights from the trainer to the generation workers every step. Every
rank passes a tensor of the same shape; only rank 0's contents matter, the others' are receive
buffers. Pure data movement: the output must be bit-exact. Rank 0 need not push the whole buffer
to every peer: split into W chunks, each peer can relay its chunk to the others, so no rank
sends more than (W-1)/W of the buffer.
"""

from problems.authoring import randn, rank_generator

from problems.contract import Cost, ProblemSpec

SPEC = ProblemSpec(
    name="broadcast",
    category="collective",
    pattern="broadcast from rank 0",
    origin="PyTorch DDP parameter broadcast at wrap time / OpenRLHF and verl trainer-to-rollout weight broadcast",
    dtype="bfloat16",
    atol=0.0,
    rtol=0.0,
    shapes={"default": {"numel": 32 * 2**20}, "small": {"numel": 4096}},
    description="Each rank holds a 1-D tensor of `numel` elements; every rank returns rank 0's tensor.",
)


def make_inputs(rank, world, generator, device, dtype, *, numel):
    return (randn(numel, rank_generator(generator, rank), device, dtype),)


def cost(world, dtype_bytes, *, numel):
    size = numel * dtype_bytes
    return Cost(comm_bytes=(world - 1) / world * size, hbm_bytes=2 * size)
