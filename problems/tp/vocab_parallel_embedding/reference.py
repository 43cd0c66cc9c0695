import torch
import torch.distributed as dist
import torch.nn.functional as F


@torch.no_grad()
def solution(table: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """Embeddings [batch, seq, hidden] of `tokens` from a table split by vocabulary rows: this
    rank holds ids rank * V/W .. (rank + 1) * V/W - 1."""
    rank = dist.get_rank()
    shard = table.shape[0]
    local = tokens - rank * shard
    outside = (local < 0) | (local >= shard)
    out = F.embedding(local.masked_fill(outside, 0), table)
    out.masked_fill_(outside.unsqueeze(-1), 0.0)
    dist.all_reduce(out, op=dist.ReduceOp.SUM)
    return out
