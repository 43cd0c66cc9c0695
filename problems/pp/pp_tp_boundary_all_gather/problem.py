"""Pipeline boundary between tensor-parallel stages: send 1/TP of the activations, all-gather after.

Pattern from Megatron-LM's scatter-gather optimisation of pipeline communication
(``scatter_gather_tensors_in_pipeline``, Narayanan et al. 2021): with tensor parallelism inside
each pipeline stage, the TP ranks of a stage all hold the same activations after the stage's
row-parallel all-reduce, so instead of each of them sending the whole tensor to its peer in the
next stage, TP rank j sends only chunk j of the flattened activations, and the next stage's TP
group all-gathers the chunks (over NVLink, while the inter-stage link carries 1/TP of the
bytes). Here two stages meet at one boundary and each is tensor-parallel over world / 2
ranks: world 4 is two stages of TP 2, world 8 two stages of TP 4. Ranks are laid out as
Megatron does, TP fastest: rank = stage * tp + j. Every stage is a tensor-parallel MLP block with
its residual, ``h + all_reduce_tp(gelu(h @ w1_j) @ w2_j)`` (column-parallel w1, row-parallel w2,
tanh GELU). Every rank returns its stage's output, identical on the TP ranks of the stage.
A fast version can replace the all-reduce + chunked send + all-gather by a reduce-scatter whose
shards go straight to the next stage, and overlap the boundary with the GEMMs. Every rank's data
loader yields the same microbatch (the first stage reads it).
"""

from problems.authoring import randn, rank_generator

from problems.contract import Cost, ProblemSpec

SPEC = ProblemSpec(
    name="pp_tp_boundary_all_gather",
    category="pp",
    pattern="TP all-reduce, P2P send of 1/TP chunks to the next stage, TP all-gather on the receiver",
    origin="Megatron-LM pipeline scatter-gather optimisation (scatter_gather_tensors_in_pipeline) with tensor-parallel stages",
    world_sizes=(4, 8),
    dtype="bfloat16",
    atol=1e-3,
    rtol=2**-8,
    shapes={"default": {"tokens": 4096, "hidden": 8192, "ffn": 28672},
            "small": {"tokens": 16, "hidden": 32, "ffn": 64}},
    description="Two pipeline stages of tp = world/2 ranks each; rank = stage * tp + j. Every rank holds the same microbatch x ([tokens, hidden]) and its "
                "shards of its stage's weights: w1 ([hidden, ffn/tp], columns j*ffn/tp.. of the stage's [hidden, ffn]) and w2 "
                "([ffn/tp, hidden], the matching rows). With h_0 = x and h_{s+1} = h_s + sum_j gelu_tanh(h_s @ w1_{s,j}) @ "
                "w2_{s,j}, every rank of stage s returns h_{s+1}, shape [tokens, hidden]. Activations cross the stage boundary "
                "as tp chunks of the flattened tensor, chunk j from TP rank j of stage 0 to TP rank j of stage 1.",
)


STAGES = 2


def make_inputs(rank, world, generator, device, dtype, *, tokens, hidden, ffn):
    tp = world // STAGES
    x = randn((tokens, hidden), generator, device, dtype)  # shared: the same microbatch on every rank
    own = rank_generator(generator, rank)
    w1 = randn((hidden, ffn // tp), own, device, dtype, scale=hidden**-0.5)
    w2 = randn((ffn // tp, hidden), own, device, dtype, scale=0.5 * ffn**-0.5)
    return x, w1, w2


def cost(world, dtype_bytes, *, tokens, hidden, ffn):
    tp = world // STAGES
    activation = tokens * hidden * dtype_bytes
    # TP all-reduce, then on stage 0 the 1/tp chunk to stage 1, on stage 1 its share of the all-gather
    comm = 2 * (tp - 1) / tp * activation + max(activation / tp, (tp - 1) / tp * activation)
    flops = 4 * tokens * hidden * (ffn // tp) + 10 * tokens * (ffn // tp)
    return Cost(comm_bytes=comm, flops=flops,
                hbm_bytes=2 * hidden * (ffn // tp) * dtype_bytes + 6 * activation + 2 * tokens * (ffn // tp) * dtype_bytes)
