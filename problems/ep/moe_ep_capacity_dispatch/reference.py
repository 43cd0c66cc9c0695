import torch
import torch.distributed as dist


@torch.no_grad()
def solution(x: torch.Tensor, routing_map: torch.Tensor, probs: torch.Tensor, capacity: torch.Tensor):
    """Keep at most `capacity` token copies per expert (highest gate probability first, ties to the
    lower token index), pad every expert to `capacity` slots and exchange the padded buffers.
    Returns this rank's experts' slots from every source rank, [local_experts, world * capacity,
    hidden], and their gate probabilities, [local_experts, world * capacity] (0 where empty)."""
    world = dist.get_world_size()
    tokens, hidden = x.shape
    experts = routing_map.shape[1]
    local_experts = experts // world
    cap = int(capacity)

    # drop: per expert, rank the routed tokens by probability; the stable sort keeps token order among ties
    score = probs.masked_fill(~routing_map, float("-inf"))
    ranked = torch.sort(score, dim=0, descending=True, stable=True).indices[:cap]  # [cap, experts]
    keep = torch.zeros_like(routing_map)
    keep.scatter_(0, ranked, routing_map.gather(0, ranked))

    # pad: kept tokens fill each expert's slots in token order
    expert_id, token_id = keep.t().nonzero(as_tuple=True)  # expert-major, tokens ascending within an expert
    slot = torch.cumsum(keep.t().to(torch.int64), dim=1)[expert_id, token_id] - 1
    send_x = x.new_zeros((experts, cap, hidden))
    send_x[expert_id, slot] = x[token_id]
    send_p = probs.new_zeros((experts, cap))
    send_p[expert_id, slot] = probs[token_id, expert_id]

    # exchange: experts are ordered by owner rank, so every rank gets an equal share
    recv_x = torch.empty_like(send_x)
    dist.all_to_all_single(recv_x, send_x)
    recv_p = torch.empty_like(send_p)
    dist.all_to_all_single(recv_p, send_p)
    # [source rank, local expert, slot] -> [local expert, source rank * slot]
    expert_x = recv_x.view(world, local_experts, cap, hidden).transpose(0, 1).reshape(local_experts, world * cap, hidden)
    expert_probs = recv_p.view(world, local_experts, cap).transpose(0, 1).reshape(local_experts, world * cap)
    return expert_x, expert_probs
