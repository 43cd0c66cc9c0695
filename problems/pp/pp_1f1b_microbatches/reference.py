import math

import torch
import torch.distributed as dist
import torch.nn.functional as F


def _exchange(send: torch.Tensor | None, send_to: int | None, recv_like: torch.Tensor | None, recv_from: int | None):
    """One batched P2P exchange with the neighbours (Megatron's _communicate); a peer of None (the
    pipeline's ends) skips that half. Returns the received tensor."""
    ops, received = [], None
    if recv_from is not None:
        received = torch.empty_like(recv_like)
        ops.append(dist.P2POp(dist.irecv, received, recv_from))
    if send is not None and send_to is not None:
        ops.append(dist.P2POp(dist.isend, send.contiguous(), send_to))
    if ops:
        for request in dist.batch_isend_irecv(ops):
            request.wait()
    return received


def _gelu_tanh_grad(z: torch.Tensor) -> torch.Tensor:
    """d/dz of 0.5 z (1 + tanh(sqrt(2/pi) (z + 0.044715 z^3)))."""
    c = math.sqrt(2.0 / math.pi)
    t = torch.tanh(c * (z + 0.044715 * z**3))
    return 0.5 * (1 + t) + 0.5 * z * (1 - t * t) * c * (1 + 3 * 0.044715 * z * z)


@torch.no_grad()
def solution(x: torch.Tensor, targets: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """Forward and backward of every microbatch through `world` pipeline stages (this rank is
    stage `rank`: h -> h + gelu(h @ w)) in 1F1B order; returns this stage's weight gradient,
    summed over microbatches in fp32, [hidden, hidden]."""
    rank, world = dist.get_rank(), dist.get_world_size()
    microbatches = x.shape[0]
    first, last = rank == 0, rank == world - 1
    prev_rank, next_rank = (None if first else rank - 1), (None if last else rank + 1)
    like = x[0]
    acc = torch.promote_types(w.dtype, torch.float32)
    main_grad = torch.zeros(w.shape, dtype=acc, device=w.device)

    def forward(m: int, h: torch.Tensor | None):
        h = x[m] if first else h
        z = h @ w
        return h, z, h + F.gelu(z, approximate="tanh")

    def backward(m: int, h: torch.Tensor, z: torch.Tensor, y: torch.Tensor, received: torch.Tensor | None):
        grad_y = (y - targets[m]) if last else received  # the loss gradient on the last stage
        grad_z = (grad_y.to(acc) * _gelu_tanh_grad(z.to(acc))).to(z.dtype)
        main_grad.add_(h.t() @ grad_z)
        return None if first else grad_y + grad_z @ w.t()

    warmup = min(world - rank - 1, microbatches)
    steady = microbatches - warmup
    in_flight = []  # (microbatch, stage input, pre-activation, stage output), oldest first
    for m in range(warmup):
        h = _exchange(None, None, like, prev_rank)
        h, z, y = forward(m, h)
        _exchange(y, next_rank, None, None)
        in_flight.append((m, h, z, y))
    h = _exchange(None, None, like, prev_rank) if steady else None
    for i in range(steady):
        h, z, y = forward(warmup + i, h)
        received = _exchange(y, next_rank, like, next_rank)  # send forward, receive backward
        in_flight.append((warmup + i, h, z, y))
        grad_h = backward(*in_flight.pop(0), received)
        if i + 1 < steady:
            h = _exchange(grad_h, prev_rank, like, prev_rank)  # send backward, receive forward
        else:
            _exchange(grad_h, prev_rank, None, None)
    for _ in range(warmup):
        received = _exchange(None, None, like, next_rank)
        grad_h = backward(*in_flight.pop(0), received)
        _exchange(grad_h, prev_rank, None, None)
    return main_grad
