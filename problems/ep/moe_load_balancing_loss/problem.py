"""MoE router with the global load-balancing loss: top-k routing on every rank, then the
Switch-style auxiliary loss from expert counts and mean probabilities over all ranks' tokens.

Pattern from Megatron-LM's router with ``moe_router_load_balancing_type="global_aux_loss"``
(``switch_load_balancing_loss_func`` fed with token counts all-reduced over the data- and
context-parallel ranks), after the Switch Transformer / GShard auxiliary loss, and from the
global expert counts that DeepSeek-V3's auxiliary-loss-free balancing reads. Every rank holds
the router logits of its own tokens. It takes the softmax over experts in fp32, picks each
token's top_k experts (ranked by logit, ties to the lower expert index: with bf16 logits about
two tokens in five have a tie among or just past their top 8, so the rule is part of the result)
and renormalises their probabilities to sum to 1 (the gates). The loss needs two global
per-expert sums: f_e, the fraction of all routed copies that went to expert e, and P_e, the mean
router probability of expert e over all tokens; loss = E * sum_e f_e * P_e (1 when the load is
perfectly uniform). A per-batch statistic computed over the data-parallel group makes the
balancing act on the global batch rather than on each micro-batch. Two all-reduces of E numbers
each are latency-bound; the softmax and top-k over the logits are memory-bound. A fast version
reads the logits once and makes one small all-reduce.
"""

from problems.authoring import randn, rank_generator

from problems.contract import Cost, ProblemSpec

SPEC = ProblemSpec(
    name="moe_load_balancing_loss",
    category="ep",
    pattern="local softmax + top-k routing, all-reduce of per-expert token counts and probability sums",
    origin="Megatron-LM router global_aux_loss (switch_load_balancing_loss_func); Switch Transformer / GShard auxiliary loss; "
           "DeepSeek-V3 global expert load counts",
    dtype="bfloat16",
    atol=1e-6,
    rtol=1e-5,
    shapes={"default": {"tokens": 65536, "experts": 256, "top_k": 8}, "small": {"tokens": 64, "experts": 16, "top_k": 2}},
    description="Rank r holds the router logits of its tokens ([tokens, experts]) and top_k (0-d int64, the same on every "
                "rank). With p = softmax(logits) in fp32 over experts and each token's top_k experts ranked by logit (ties: "
                "lower expert index first), every rank returns: expert_index ([tokens, top_k], int64, best first), gates "
                "([tokens, top_k], fp32: p at those experts divided by their sum), tokens_per_expert ([experts], int64: "
                "routed copies per expert summed over all ranks) and the fp32 scalar loss experts * sum_e f_e * P_e, with "
                "f_e = tokens_per_expert[e] / (top_k * total tokens) and P_e = the sum over all ranks' tokens of p[:, e] "
                "divided by the total number of tokens.",
)


def make_inputs(rank, world, generator, device, dtype, *, tokens, experts, top_k):
    import torch

    popularity = 0.3 * torch.randn(experts, generator=generator, device=device)  # shared: the same experts are hot on every rank
    logits = randn((tokens, experts), rank_generator(generator, rank), device, torch.float32) + popularity
    return logits.to(dtype), torch.tensor(top_k, dtype=torch.int64, device=device)


def cost(world, dtype_bytes, *, tokens, experts, top_k):
    return Cost(comm_bytes=2 * (world - 1) / world * experts * 12, flops=8 * tokens * experts,
                hbm_bytes=tokens * experts * dtype_bytes + tokens * top_k * 12 + experts * 12)
