import torch
import torch.distributed as dist
import torch.nn.functional as F


@torch.no_grad()
def solution(x: torch.Tensor, w_gate_up: torch.Tensor, w_down: torch.Tensor) -> torch.Tensor:
    """SwiGLU MLP on this rank's slice of the intermediate dimension, then the sum of the
    partial outputs over ranks: [tokens, hidden] on every rank."""
    gate, up = torch.matmul(x, w_gate_up).chunk(2, dim=-1)
    out = torch.matmul(F.silu(gate) * up, w_down)
    dist.all_reduce(out, op=dist.ReduceOp.SUM)
    return out
