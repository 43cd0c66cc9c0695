"""All-gather of shards whose lengths differ per rank and per call (known to every rank).

Pattern from gathering variable numbers of rows across ranks: Megatron-LM's MoE token
dispatchers gather each rank's routed tokens over the tensor-parallel group with per-rank
split sizes (``gather_from_sequence_parallel_region`` with ``output_split_sizes``), packed
sequences of uneven length are gathered the same way, and torchmetrics' ``gather_all_tensors``
does it for per-rank predictions of different counts. The split sizes come from an earlier
exchange, so every rank holds them. NCCL's uneven all-gather is a group of broadcasts; the
portable version (as here, and as torchmetrics does it) pads every shard to the longest, runs
one all-gather and trims. Pure data movement: the output must be bit-exact. The padding
moves up to W times more than the data; a fast version moves each rank's rows once to every
peer, at their final offsets.
"""

from problems.authoring import randn, rank_generator

from problems.contract import Cost, ProblemSpec

SPEC = ProblemSpec(
    name="all_gather_variable",
    category="collective",
    pattern="all-gather with uneven, per-call split sizes (concatenate along dim 0)",
    origin="Megatron-LM MoE token gather with output_split_sizes; torchmetrics gather_all_tensors (pad, all-gather, trim)",
    dtype="bfloat16",
    atol=0.0,
    rtol=0.0,
    shapes={"default": {"max_rows": 4096, "hidden": 4096}, "small": {"max_rows": 16, "hidden": 32}},
    description="Every rank holds the same lengths ([world], int64, each in 1..max_rows, different every call); rank r holds "
                "a shard of lengths[r] rows ([lengths[r], hidden]). Every rank returns the concatenation of the shards of "
                "ranks 0..world-1, shape [sum(lengths), hidden].",
)


def make_inputs(rank, world, generator, device, dtype, *, max_rows, hidden):
    import torch

    lengths = torch.randint(1, max_rows + 1, (world,), generator=generator, device=device)  # shared: every rank knows the splits
    shard = randn((int(lengths[rank]), hidden), rank_generator(generator, rank), device, dtype)
    return shard, lengths


def cost(world, dtype_bytes, *, max_rows, hidden):
    shard = (max_rows + 1) / 2 * hidden * dtype_bytes  # the expected shard
    return Cost(comm_bytes=(world - 1) * shard, hbm_bytes=(world + 1) * shard)
