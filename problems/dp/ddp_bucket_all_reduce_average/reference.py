import torch
import torch.distributed as dist


@torch.no_grad()
def solution(bucket_cap_bytes: torch.Tensor, *grads: torch.Tensor):
    """Average every gradient over the ranks, bucket by bucket: gradients fill buckets of at least
    `bucket_cap_bytes` in reverse order; each bucket is flattened, divided by the world size and
    all-reduced. Returns the averaged gradients (views of their buckets) in parameter order."""
    world = dist.get_world_size()
    cap = int(bucket_cap_bytes)

    # bucket assignment: backward produces gradients last parameter first
    buckets, current, filled = [], [], 0
    for index in reversed(range(len(grads))):
        current.append(index)
        filled += grads[index].numel() * grads[index].element_size()
        if filled >= cap:
            buckets.append(current)
            current, filled = [], 0
    if current:
        buckets.append(current)

    averaged = [None] * len(grads)
    for bucket in buckets:
        flat = torch.cat([grads[i].reshape(-1) for i in bucket])
        flat.div_(world)
        dist.all_reduce(flat, op=dist.ReduceOp.SUM)
        for i, view in zip(bucket, flat.split([grads[i].numel() for i in bucket])):
            averaged[i] = view.view(grads[i].shape)
    return tuple(averaged)
