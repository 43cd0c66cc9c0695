import torch
import torch.distributed as dist

BLOCK = 128  # values per scaling block
FP8 = torch.float8_e5m2
FP8_MAX = 57344.0


@torch.no_grad()
def solution(grad: torch.Tensor) -> torch.Tensor:
    """Reduce-scatter (sum) of the gradient bucket with fp8 blocks on the wire: returns this rank's
    chunk of the sum, [numel / world], in fp32."""
    world = dist.get_world_size()
    acc = torch.promote_types(grad.dtype, torch.float32)

    # quantize: one fp32 scale per block of 128 values
    blocks = grad.to(torch.float32).reshape(-1, BLOCK)
    scale = FP8_MAX / blocks.abs().amax(dim=-1).clamp_min(1e-30)
    q = (blocks * scale.unsqueeze(-1)).clamp(-FP8_MAX, FP8_MAX).to(FP8)

    # all-to-all: chunk c of every rank goes to rank c (fp8 moved as its bytes)
    q_recv = torch.empty_like(q.view(torch.uint8))
    scale_recv = torch.empty_like(scale)
    dist.all_to_all_single(q_recv, q.view(torch.uint8))
    dist.all_to_all_single(scale_recv, scale)

    # dequantize the world copies of this rank's chunk and sum them
    received = q_recv.view(FP8).to(torch.float32) / scale_recv.unsqueeze(-1)
    received = received.reshape(world, -1)
    reduced = received[0].clone()
    for source in range(1, world):
        reduced += received[source]
    return reduced.to(acc)
