"""2-D FSDP x TP column-parallel linear: all-gather the weight over the FSDP axis and the
sequence over the TP axis, then the local GEMM.

Pattern from torchtitan's 2-D parallelism (a ``DeviceMesh`` of ("dp_shard", "tp"): the tensor
plan, ``ColwiseParallel`` with sequence-parallel inputs, then ``fully_shard`` over the
data-parallel axis), and of Megatron-LM's tensor + sequence parallelism combined with sharded
data parallelism. The W ranks form a dp x tp mesh with tp = 2 and rank = d * tp + t, so a TP
group is tp consecutive ranks (the fast links) and an FSDP group is every tp-th rank. The weight
W [out, in] is split by output rows over the TP ranks, and each TP rank's block is sharded again
by rows over the FSDP ranks: rank (d, t) holds rows of block t, shard d. Each FSDP group member
trains on its own batch, whose sequence is split over the TP ranks. The forward pass all-gathers
the weight block over the FSDP group and the sequence over the TP group, then multiplies: rank
(d, t) returns its TP column slice of the layer output for the whole sequence of batch d. The
reference builds both kinds of sub-group once, in the same order on every rank. Meaningful only
with both axes at least 2, so world sizes 4 and 8. A fast version overlaps both gathers with the
GEMM, starting on the local pieces.
"""

from problems.authoring import randn, rank_generator

from problems.contract import Cost, ProblemSpec

SPEC = ProblemSpec(
    name="fsdp_tp_2d_linear",
    category="fsdp",
    pattern="all-gather of weight shards over the FSDP sub-group and of sequence shards over the TP sub-group, then GEMM",
    origin="torchtitan 2-D parallelism (FSDP2 fully_shard over dp_shard x ColwiseParallel over tp); Megatron-LM TP + SP",
    world_sizes=(4, 8),
    dtype="bfloat16",
    atol=1e-3,
    rtol=2**-8,
    shapes={"default": {"tokens": 8192, "in_features": 4096, "out_features": 14336, "tp": 2},
            "small": {"tokens": 32, "in_features": 32, "out_features": 64, "tp": 2}},
    description="Mesh: tp_size (0-d int64) TP ranks by dp = world/tp FSDP ranks, rank = d*tp + t. Rank (d, t) holds "
                "x ([tokens/tp, in_features]): rows t*tokens/tp..(t+1)*tokens/tp-1 of batch d's activations X_d "
                "([tokens, in_features]), and weight_shard ([out_features/world, in_features]): rows d*R..(d+1)*R-1, "
                "R = out_features/world, of the TP block W_t = W[t*out_features/tp:(t+1)*out_features/tp] of the weight "
                "W ([out_features, in_features]). Rank (d, t) returns X_d @ W_t^T, shape [tokens, out_features/tp].",
)


def make_inputs(rank, world, generator, device, dtype, *, tokens, in_features, out_features, tp):
    import torch

    tp = min(tp, world)  # world 1 (the harness's single-GPU timing) is the plain local GEMM
    own = rank_generator(generator, rank)
    x = randn((tokens // tp, in_features), own, device, dtype)
    weight_shard = randn((out_features // world, in_features), own, device, dtype, scale=in_features**-0.5)
    return x, weight_shard, torch.tensor(tp, dtype=torch.int64, device=device)


def cost(world, dtype_bytes, *, tokens, in_features, out_features, tp):
    tp = min(tp, world)
    dp = world // tp
    block = out_features // tp * in_features * dtype_bytes  # this rank's TP block of the weight
    sequence = tokens * in_features * dtype_bytes
    out = tokens * (out_features // tp) * dtype_bytes
    return Cost(comm_bytes=(dp - 1) / dp * block + (tp - 1) / tp * sequence,
                flops=2 * tokens * in_features * (out_features // tp),
                hbm_bytes=block / dp + sequence / tp + 2 * (block + sequence) + out)
