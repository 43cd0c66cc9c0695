import torch
import torch.distributed as dist


@torch.no_grad()
def solution(expert_out: torch.Tensor, recv_counts: torch.Tensor, expert_index: torch.Tensor, probs: torch.Tensor) -> torch.Tensor:
    """Send every expert output row back to the rank its token came from, then sum each token's
    top_k rows weighted by its gate probabilities: returns [tokens, hidden]."""
    world = dist.get_world_size()
    tokens, top_k = expert_index.shape
    local_experts = recv_counts.shape[1]
    hidden = expert_out.shape[1]

    # the dispatch sent this rank's copies sorted by expert (stable: by token within an expert)
    flat = expert_index.reshape(-1)
    order = torch.argsort(flat, stable=True)
    back_splits = torch.bincount(flat // local_experts, minlength=world).tolist()  # rows each rank returns to us
    out_splits = recv_counts.sum(dim=1).tolist()  # rows we return to each source rank
    returned = expert_out.new_empty((tokens * top_k, hidden))
    dist.all_to_all_single(returned, expert_out, back_splits, out_splits)

    # undo the sort, then the weighted sum over each token's copies
    per_copy = torch.empty_like(returned)
    per_copy[order] = returned
    acc = torch.promote_types(expert_out.dtype, torch.float32)
    out = (per_copy.view(tokens, top_k, hidden).to(acc) * probs.unsqueeze(-1).to(acc)).sum(dim=1)
    return out.to(expert_out.dtype)
