"""MoE token dispatch in float8: each token's 1x128 block scales travel with its fp8 payload.

Pattern from DeepSeek's DeepEP ``dispatch`` with fp8 inputs (as used for DeepSeek-V3 training
and inference): before dispatch every token's hidden vector is cast to float8_e4m3fn in blocks of
128 channels, each block with its own fp32 scale, so the all-to-all carries about half the bytes
of bf16 and the experts' fp8 grouped GEMMs (DeepGEMM) consume the payload as is. A token is sent
once to every rank that holds at least one of its top_k experts (not once per expert), with its
scales, its routing (expert ids, rewritten as local expert indices, -1 for experts elsewhere) and
its gate weights. As in DeepEP, the dispatch also gets the layout computed from the routing, here
each rank's token count per expert. Ranks first exchange counts (tokens per destination rank and
per expert), then the packed rows (fp8 bytes, scale bytes and routing in one uint8 row per token
copy) move in one uneven all-to-all. Every rank returns, in order of source rank and then source
token: the fp8 payload, the scales, the local expert indices, the gate weights of its own experts
(0 elsewhere), the global id of each received token (source rank * tokens + index), and how many
received tokens go to each local expert. The quantization is per token and specified to the bit
(amax over the block, ``scale = 448 / max(amax, 1e-4)``, ``q = float8_e4m3fn(clamp(x * scale,
-448, 448))`` with round to nearest even; the token is ``q / scale``), so every output is compared
exactly and without an upcast run (an fp32 run gives the same fp8 codes): a per-token instead of
per-block scale, a truncating cast, a token sent once per expert or received in another order
fail.
"""

from problems.authoring import randn, rank_generator, topk_routing

from problems.contract import Cost, ProblemSpec

SPEC = ProblemSpec(
    name="fp8_all_to_all_dispatch",
    category="lowprec",
    pattern="per-token-block fp8 quantize, count exchange, uneven all-to-all of packed fp8 rows with scales and routing",
    origin="DeepEP dispatch with fp8 payloads and 1x128 per-token block scales (DeepSeek-V3)",
    dtype="bfloat16",
    atol=0.0,
    rtol=0.0,
    upcast=False,
    shapes={"default": {"tokens": 4096, "hidden": 7168, "experts": 256, "top_k": 8},
            "small": {"tokens": 32, "hidden": 256, "experts": 64, "top_k": 4}},
    description="Rank r holds its tokens x ([tokens, hidden], hidden a multiple of 128), their routing topk_idx ([tokens, top_k], "
                "distinct expert ids; expert e lives on rank e // (experts/world)) and gate weights topk_weights ([tokens, top_k], "
                "fp32), and num_tokens_per_expert ([experts] int64, how many of its tokens chose each expert). Each token is "
                "quantized per block of 128 channels (scale = 448/max(amax, 1e-4) in fp32, q = e4m3(clamp(x*scale, -448, 448))) "
                "and sent once to every rank holding one of its experts. Rank r returns, for the R tokens it receives, ordered by "
                "source rank then source index: recv_x [R, hidden] float8_e4m3fn, recv_scales [R, hidden/128] fp32, "
                "recv_topk_idx [R, top_k] int64 (local expert index, -1 if not on rank r), recv_topk_weights [R, top_k] fp32 "
                "(0 where the index is -1), recv_src [R] int64 (source rank * tokens + token index), and "
                "tokens_per_expert [experts/world] int64 (received tokens per local expert).",
)


def make_inputs(rank, world, generator, device, dtype, *, tokens, hidden, experts, top_k):
    import torch

    popularity = torch.randn(experts, generator=generator, device=device)  # shared: the same experts are hot on every rank
    own = rank_generator(generator, rank)
    topk_idx, topk_weights = topk_routing(own, popularity, tokens, top_k)
    # activations with per-channel outliers, the reason for fine-grained scales
    channel_scale = torch.exp(torch.randn(hidden, generator=own, device=device))
    x = (randn((tokens, hidden), own, device, torch.float32) * channel_scale).to(dtype)
    num_tokens_per_expert = torch.bincount(topk_idx.reshape(-1), minlength=experts)  # the dispatch layout
    return x, topk_idx, topk_weights, num_tokens_per_expert


def cost(world, dtype_bytes, *, tokens, hidden, experts, top_k):
    from math import comb

    local = experts // world
    remote_ranks = (world - 1) * (1 - comb(experts - local, top_k) / comb(experts, top_k))  # expected, uniform routing
    row = hidden + 4 * hidden // 128 + 12 * top_k + 8  # fp8 payload, scales, routing, source id
    return Cost(comm_bytes=tokens * remote_ranks * row, flops=3 * tokens * hidden,
                hbm_bytes=tokens * hidden * dtype_bytes + 2 * tokens * (remote_ranks + 1) * row)
