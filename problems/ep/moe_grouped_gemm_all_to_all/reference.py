import torch
import torch.distributed as dist
import torch.nn.functional as F


@torch.no_grad()
def solution(x: torch.Tensor, expert_index: torch.Tensor, probs: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
    """Expert-parallel SwiGLU MoE MLP: dispatch each token to its top_k experts (expert e lives on
    rank e // local_experts), run every local expert on the rows it received, bring the results
    back and sum them weighted by the gates: returns [tokens, hidden]."""
    world = dist.get_world_size()
    tokens, hidden = x.shape
    top_k = expert_index.shape[1]
    local_experts, _, two_ffn = w1.shape
    ffn = two_ffn // 2

    # dispatch: one copy of a token per chosen expert, sorted by expert (and so by destination rank)
    flat = expert_index.reshape(-1)
    order = torch.argsort(flat, stable=True)
    send = x[order // top_k]
    per_expert = torch.bincount(flat, minlength=local_experts * world)
    from_ranks = torch.empty_like(per_expert)  # [source rank, local expert], flattened
    dist.all_to_all_single(from_ranks, per_expert)
    send_splits = per_expert.view(world, local_experts).sum(dim=1).tolist()
    recv_splits = from_ranks.view(world, local_experts).sum(dim=1).tolist()
    received = x.new_empty((sum(recv_splits), hidden))
    dist.all_to_all_single(received, send, recv_splits, send_splits)

    # regroup source-major -> expert-major, one GEMM pair per local expert, then back
    expert_of_row = torch.repeat_interleave(torch.arange(local_experts, device=x.device).repeat(world), from_ranks)
    by_expert = torch.argsort(expert_of_row, stable=True)
    grouped = received[by_expert]
    rows_per_expert = from_ranks.view(world, local_experts).sum(dim=0).tolist()
    outputs = []
    for e, rows in enumerate(grouped.split(rows_per_expert)):
        gate_up = rows @ w1[e]
        outputs.append((F.silu(gate_up[:, :ffn]) * gate_up[:, ffn:]) @ w2[e])
    processed = torch.empty_like(received)
    processed[by_expert] = torch.cat(outputs)

    # combine: results go back to their tokens' ranks, then undo the sort and weight by the gates
    returned = x.new_empty((tokens * top_k, hidden))
    dist.all_to_all_single(returned, processed, send_splits, recv_splits)
    per_copy = torch.empty_like(returned)
    per_copy[order] = returned
    acc = torch.promote_types(x.dtype, torch.float32)
    out = (per_copy.view(tokens, top_k, hidden).to(acc) * probs.unsqueeze(-1).to(acc)).sum(dim=1)
    return out.to(x.dtype)
