import torch
import torch.distributed as dist


@torch.no_grad()
def solution(x: torch.Tensor, weight: torch.Tensor, grad_output: torch.Tensor):
    """Input and weight gradients of out = gather(x) @ weight.T: returns this rank's
    [s/world, hidden] block of the input gradient (reduce-scattered along the sequence) and
    the [n/world, hidden] weight gradient."""
    world = dist.get_world_size()
    # re-gather the input the forward pass saved only a shard of, behind the dgrad GEMM
    total_input = x.new_empty((world * x.shape[0], x.shape[1]))
    gather = dist.all_gather_into_tensor(total_input, x.contiguous(), async_op=True)
    grad_input = torch.matmul(grad_output, weight)  # [s, hidden], partial over the ranks' output columns
    gather.wait()
    # reduce-scatter the input gradient along the sequence, behind the wgrad GEMM
    sub_grad_input = grad_input.new_empty((x.shape[0], x.shape[1]))
    scatter = dist.reduce_scatter_tensor(sub_grad_input, grad_input, op=dist.ReduceOp.SUM, async_op=True)
    grad_weight = torch.matmul(grad_output.t(), total_input)
    scatter.wait()
    return sub_grad_input, grad_weight
