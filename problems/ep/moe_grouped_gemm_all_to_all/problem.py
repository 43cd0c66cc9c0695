"""The whole expert-parallel MoE MLP: dispatch, grouped SwiGLU expert GEMMs of uneven sizes,
combine.

Pattern from Megatron-LM's MoE layer with the all-to-all token dispatcher and ``GroupedMLP``
(grouped GEMMs over the local experts), as used for Mixtral, DeepSeek-V2/V3 and Qwen-MoE
training, and from DeepEP dispatch/combine around DeepGEMM grouped GEMMs. Each rank owns E/W
experts, each a SwiGLU MLP (``w1`` [hidden, 2*ffn] holding the gate and up projections side by
side, ``w2`` [ffn, hidden]). Tokens go to their top_k experts with an uneven all-to-all (counts
first, then rows); the expert rank regroups what it received from source-major to expert-major
order, runs one GEMM pair per local expert on a token count that differs per expert and per
call, restores the source-major order and sends the results back; the source rank sums each
token's top_k results weighted by the gates in fp32. Routing is skewed (the same experts are hot
on every rank), so both the splits and the GEMM sizes are uneven. A fast version overlaps the
transfers with the GEMMs (start an expert as soon as its rows have arrived), runs the experts as
one grouped kernel, and sends a token once per destination rank rather than once per expert.
"""

from math import comb

from problems.authoring import randn, rank_generator, topk_routing

from problems.contract import Cost, ProblemSpec

SPEC = ProblemSpec(
    name="moe_grouped_gemm_all_to_all",
    category="ep",
    pattern="count exchange, uneven all-to-all dispatch, grouped SwiGLU GEMMs per local expert, reverse all-to-all combine",
    origin="Megatron-LM MoE layer (MoEAlltoAllTokenDispatcher + GroupedMLP); DeepEP dispatch/combine with DeepGEMM grouped GEMMs",
    dtype="bfloat16",
    atol=1e-3,
    rtol=2**-8,
    shapes={"default": {"tokens": 4096, "hidden": 2048, "ffn": 1408, "experts": 64, "top_k": 6},
            "small": {"tokens": 32, "hidden": 32, "ffn": 16, "experts": 16, "top_k": 2}},
    description="Rank r holds its tokens x ([tokens, hidden]), their routing expert_index ([tokens, top_k], int64 ids of "
                "distinct experts; expert e lives on rank e // (experts/world)), the gates probs ([tokens, top_k], fp32) "
                "and the weights of its experts r*E/W..(r+1)*E/W-1: w1 ([experts/world, hidden, 2*ffn], gate projection "
                "in columns :ffn, up projection in ffn:) and w2 ([experts/world, ffn, hidden]). With "
                "mlp_e(v) = (silu(v @ w1_e[:, :ffn]) * (v @ w1_e[:, ffn:])) @ w2_e, rank r returns for each token t "
                "sum_j probs[t, j] * mlp_{expert_index[t, j]}(x[t]), shape [tokens, hidden].",
)


def make_inputs(rank, world, generator, device, dtype, *, tokens, hidden, ffn, experts, top_k):
    import torch

    # shared: the same experts are hot on every rank (the hottest gets about 3x the mean load)
    popularity = 0.3 * torch.randn(experts, generator=generator, device=device)
    own = rank_generator(generator, rank)
    expert_index, probs = topk_routing(own, popularity, tokens, top_k)
    x = randn((tokens, hidden), own, device, dtype)
    w1 = randn((experts // world, hidden, 2 * ffn), own, device, dtype, scale=hidden**-0.5)
    w2 = randn((experts // world, ffn, hidden), own, device, dtype, scale=ffn**-0.5)
    return x, expert_index, probs, w1, w2


def cost(world, dtype_bytes, *, tokens, hidden, ffn, experts, top_k):
    # a token goes once to every other rank that holds one of its experts (uniform routing, in expectation),
    # and one pre-summed result per such rank comes back
    local = experts // world
    remote_ranks = (world - 1) * (1 - comb(experts - local, top_k) / comb(experts, top_k))
    row = hidden * dtype_bytes
    copies = tokens * top_k  # rows each rank's experts process, in expectation
    return Cost(comm_bytes=2 * tokens * remote_ranks * row, flops=copies * (6 * hidden * ffn + 4 * ffn) + 2 * copies * hidden,
                hbm_bytes=2 * tokens * row + local * 3 * hidden * ffn * dtype_bytes + copies * (4 * row + 6 * ffn * dtype_bytes))
