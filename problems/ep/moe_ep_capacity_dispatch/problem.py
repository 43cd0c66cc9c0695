"""Capacity-limited MoE dispatch: each rank keeps at most C token copies per expert, pads every
expert to C slots and exchanges the padded buffers with an equal-split all-to-all.

Pattern from capacity-factor token dropping in GShard / Switch Transformer, as implemented by
Megatron-LM's router (``moe_expert_capacity_factor`` with the "probs" drop policy and
``moe_pad_expert_input_to_capacity``) and DeepSpeed-MoE, and from the fixed-size receive buffers
of DeepEP's low-latency dispatch: padding every (source rank, expert) pair to the same capacity
makes all split sizes static, so there is no count exchange and no host round trip, and the
expert GEMMs see fixed shapes. The router marks each token's top_k experts in a [tokens,
experts] routing map with gate probabilities. When more than C of a rank's tokens pick one
expert, that rank keeps the C with the highest probability (ties go to the lower token index)
and drops the rest; kept tokens fill the expert's slots in token order and the unused slots are
zero. Expert e lives on rank e // (experts / W). Every rank returns, for each of its local
experts, the C slots of source ranks 0..W-1 in turn, and the gate probability of every slot (0
in empty slots). Routing is mildly skewed (the same experts are hot on every rank, the hottest
with about twice the mean load), so at a capacity factor of 1.25 hot experts drop a few per cent
of the copies and cold ones leave slots empty. Pure selection and data movement: the outputs
must be bit-exact. A fast version selects on the GPU without a full sort per expert, writes kept
rows straight into the peers' receive buffers, and sends no padding.
"""

from math import ceil

from problems.authoring import randn, rank_generator, topk_routing

from problems.contract import Cost, ProblemSpec

SPEC = ProblemSpec(
    name="moe_ep_capacity_dispatch",
    category="ep",
    pattern="per-expert capacity selection (token dropping), equal-split all-to-all of padded expert buffers",
    origin="GShard / Switch capacity factor; Megatron-LM router token dropping with expert-input padding; DeepSpeed-MoE; "
           "DeepEP low-latency dispatch",
    dtype="bfloat16",
    atol=0.0,
    rtol=0.0,
    shapes={"default": {"tokens": 4096, "hidden": 4096, "experts": 64, "top_k": 4, "capacity_factor": 1.25},
            "small": {"tokens": 32, "hidden": 32, "experts": 16, "top_k": 2, "capacity_factor": 1.25}},
    description="Rank r holds its tokens x ([tokens, hidden]), the router's routing_map ([tokens, experts], bool, top_k "
                "experts per token), probs ([tokens, experts], fp32 gate probabilities, 0 off the map) and capacity C "
                "(0-d int64, the same on every rank). For each expert e, rank r keeps the (at most C) tokens t with "
                "routing_map[t, e] of highest probs[t, e] (ties: lower t first), in increasing t order in slots 0.. of "
                "its C slots for e; other slots are zero. Expert e lives on rank e // (experts/world). Rank r returns "
                "expert_x [experts/world, world*C, hidden] (slot s*C+j of local expert l: slot j that source rank s "
                "filled for expert r*experts/world+l) and expert_probs [experts/world, world*C] (fp32, 0 in empty slots).",
)


def make_inputs(rank, world, generator, device, dtype, *, tokens, hidden, experts, top_k, capacity_factor):
    import torch

    # shared: the same experts are hot on every rank (max load about 2x the mean, a few % of copies dropped at 1.25)
    popularity = 0.2 * torch.randn(experts, generator=generator, device=device)
    own = rank_generator(generator, rank)
    top_index, gates = topk_routing(own, popularity, tokens, top_k)
    probs = torch.zeros((tokens, experts), device=device).scatter_(1, top_index, gates)
    routing_map = torch.zeros((tokens, experts), dtype=torch.bool, device=device).scatter_(1, top_index, True)
    x = randn((tokens, hidden), own, device, dtype)
    capacity = torch.tensor(ceil(tokens * top_k / experts * capacity_factor), dtype=torch.int64, device=device)
    return x, routing_map, probs, capacity


def cost(world, dtype_bytes, *, tokens, hidden, experts, top_k, capacity_factor):
    capacity = ceil(tokens * top_k / experts * capacity_factor)
    row = hidden * dtype_bytes + 4  # a token and its gate probability
    kept = min(tokens * top_k, experts * capacity)  # at most; dropped copies and empty slots need not travel
    return Cost(comm_bytes=(world - 1) / world * kept * row,
                hbm_bytes=tokens * (hidden * dtype_bytes + experts * 5) + kept * row + experts * capacity * row)
