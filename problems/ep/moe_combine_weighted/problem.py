"""MoE combine alone: expert outputs travel back to their tokens' ranks and each token sums its
top_k expert outputs weighted by its gate probabilities.

Pattern from the combine half of expert-parallel MoE layers: Megatron-LM's
``MoEAlltoAllTokenDispatcher.token_unpermutation`` (reverse all-to-all, then unpermute with the
router probabilities), DeepEP's ``combine`` and DeepSpeed-MoE. After dispatch, each rank holds
the outputs of its local experts for every token copy it received, grouped by source rank, then
by local expert, then by token; the source rank still holds its routing (expert_index, probs)
and the dispatch left every rank the number of rows it received from each rank for each local
expert. The expert rank does not know which rows belong to the same token, so every row goes
back on its own; the source rank puts each row back in its (token, k) place and reduces the
top_k copies of a token in fp32, weighted by the gates. Routing is skewed (the same experts are
hot on every rank, the hottest with about three times the mean load), so the split sizes are
uneven and change every call. The return traffic is as large as the dispatch's, and with fp32
weighting it is memory-bound at the receiver; a fast version writes rows straight into the
source's buffer in (token, k) order and fuses the weighted sum into the receive.
"""

from problems.authoring import randn, rank_generator, topk_routing

from problems.contract import Cost, ProblemSpec

SPEC = ProblemSpec(
    name="moe_combine_weighted",
    category="ep",
    pattern="uneven all-to-all back to the source ranks, then a gate-weighted sum of each token's top_k rows",
    origin="Megatron-LM MoEAlltoAllTokenDispatcher.token_unpermutation; DeepEP combine; DeepSpeed-MoE",
    dtype="bfloat16",
    atol=1e-3,
    rtol=2**-8,
    shapes={"default": {"tokens": 4096, "hidden": 4096, "experts": 64, "top_k": 4},
            "small": {"tokens": 32, "hidden": 32, "experts": 16, "top_k": 2}},
    description="Expert e lives on rank e // (experts/world). Rank r holds expert_out ([rows, hidden]): the outputs of its "
                "local experts for the token copies routed to them, ordered by source rank, then local expert, then token "
                "index; recv_counts ([world, experts/world], int64): how many of those rows came from each source rank for "
                "each local expert; and its own routing: expert_index ([tokens, top_k], int64, distinct experts per token) "
                "and probs ([tokens, top_k], fp32). Rank r returns, for each of its tokens t, sum_j probs[t, j] * (the row "
                "that expert expert_index[t, j] produced for copy (t, j)), shape [tokens, hidden].",
)


def make_inputs(rank, world, generator, device, dtype, *, tokens, hidden, experts, top_k):
    import torch

    # shared: the same experts are hot on every rank (the hottest gets about 3x the mean load)
    popularity = 0.3 * torch.randn(experts, generator=generator, device=device)
    local = experts // world
    recv_counts = torch.zeros((world, local), dtype=torch.int64, device=device)
    for source in range(world):  # what every rank routed to this rank's experts (known to all after the dispatch)
        index, _ = topk_routing(rank_generator(generator, source), popularity, tokens, top_k)
        recv_counts[source] = torch.bincount(index.reshape(-1), minlength=experts)[rank * local:(rank + 1) * local]
    own = rank_generator(generator, rank)  # rank r's routing is the first draw from its own generator
    expert_index, probs = topk_routing(own, popularity, tokens, top_k)
    expert_out = randn((int(recv_counts.sum()), hidden), own, device, dtype)
    return expert_out, recv_counts, expert_index, probs


def cost(world, dtype_bytes, *, tokens, hidden, experts, top_k):
    rows = tokens * top_k  # received and returned by each rank in expectation
    row = hidden * dtype_bytes
    return Cost(comm_bytes=(world - 1) / world * rows * row, flops=2 * rows * hidden,
                hbm_bytes=2 * rows * row + tokens * row + tokens * top_k * 12)
