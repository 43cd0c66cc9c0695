import torch
import torch.distributed as dist


@torch.no_grad()
def solution(logits: torch.Tensor, top_k: torch.Tensor):
    """Top-k routing of this rank's tokens and the load-balancing loss over all ranks' tokens.
    Returns expert_index [tokens, top_k], gates [tokens, top_k], the global tokens_per_expert
    [experts] and the scalar loss."""
    world = dist.get_world_size()
    tokens, experts = logits.shape
    k = int(top_k)
    probs = torch.softmax(logits.to(torch.promote_types(logits.dtype, torch.float32)), dim=-1)

    # top-k by logit; the stable sort puts the lower expert index first among equal logits
    expert_index = torch.sort(logits, dim=-1, descending=True, stable=True).indices[:, :k]
    top_probs = probs.gather(1, expert_index)
    gates = top_probs / top_probs.sum(dim=-1, keepdim=True)

    # global statistics: routed copies per expert and summed probabilities over every rank's tokens
    tokens_per_expert = torch.bincount(expert_index.reshape(-1), minlength=experts)
    dist.all_reduce(tokens_per_expert)
    probs_per_expert = probs.sum(dim=0)
    dist.all_reduce(probs_per_expert)
    total = tokens * world
    fraction = tokens_per_expert.to(probs.dtype) / (k * total)
    loss = experts * torch.sum(fraction * probs_per_expert / total)
    return expert_index, gates, tokens_per_expert, loss
