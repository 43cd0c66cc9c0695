"""Mixture-of-experts token dispatch and combine across expert-parallel ranks (top-k routing).

Pattern from the expert-parallel token dispatchers of Megatron-LM (``MoEAlltoAllTokenDispatcher``)
and DeepSpeed-MoE, and from DeepSeek's DeepEP dispatch/combine kernels: each rank owns E/W of the
E experts and routes each of its tokens to top_k experts chosen by a router. The split sizes
differ per rank pair and per call, so ranks first exchange per-expert token counts, then move the
token copies with an uneven all-to-all, apply the expert (here one [hidden, hidden] linear map per
expert), send the results back with the reverse all-to-all and sum each token's copies weighted by
its gate probabilities. Routing is skewed (some experts are popular on every rank) as in real
training, so the splits are uneven. A fast version sends a token once per destination rank rather
than once per expert, overlaps the transfers with the expert math, and avoids the host round trip
for the split sizes.
"""

from math import comb

from problems.authoring import randn, rank_generator, topk_routing

from problems.contract import Cost, ProblemSpec

SPEC = ProblemSpec(
    name="moe_dispatch_combine",
    category="ep",
    pattern="count exchange, uneven all-to-all dispatch, per-expert linear, reverse all-to-all combine",
    origin="Megatron-LM MoEAlltoAllTokenDispatcher; DeepEP dispatch/combine; DeepSpeed-MoE",
    dtype="bfloat16",
    atol=1e-3,
    rtol=2**-8,
    shapes={"default": {"tokens": 4096, "hidden": 4096, "experts": 32, "top_k": 4},
            "small": {"tokens": 32, "hidden": 32, "experts": 16, "top_k": 2}},
    description="Rank r holds its tokens x ([tokens, hidden]), their routing expert_index ([tokens, top_k], int64 ids of "
                "distinct experts in 0..experts-1; expert e lives on rank e // (experts/world)), the gate probabilities "
                "probs ([tokens, top_k], fp32) and the weights of its own experts r*E/W..(r+1)*E/W-1 ([experts/world, hidden, "
                "hidden]). Rank r returns, for each of its tokens t, sum_j probs[t, j] * (x[t] @ weight[expert_index[t, j]]), "
                "shape [tokens, hidden].",
)


def make_inputs(rank, world, generator, device, dtype, *, tokens, hidden, experts, top_k):
    import torch

    popularity = torch.randn(experts, generator=generator, device=device)  # shared: the same experts are hot on every rank
    own = rank_generator(generator, rank)
    expert_index, probs = topk_routing(own, popularity, tokens, top_k)
    x = randn((tokens, hidden), own, device, dtype)
    expert_weight = randn((experts // world, hidden, hidden), own, device, dtype, scale=hidden**-0.5)
    return x, expert_index, probs, expert_weight


def cost(world, dtype_bytes, *, tokens, hidden, experts, top_k):
    # a token goes once to every other rank that holds one of its experts (uniform routing, in expectation),
    # and one pre-summed result per such rank comes back
    local = experts // world
    remote_ranks = (world - 1) * (1 - comb(experts - local, top_k) / comb(experts, top_k))
    row = hidden * dtype_bytes
    return Cost(comm_bytes=2 * tokens * remote_ranks * row, flops=2 * tokens * top_k * hidden * (hidden + 1),
                hbm_bytes=2 * tokens * row + local * hidden * row + 2 * tokens * top_k * row)
