"""Writes a file outside its work dir (then computes the right answer)."""
import os

import torch
import torch.distributed as dist


@torch.no_grad()
def solution(tensor):
    with open(os.environ.get("KLOOP_TEST_ESCAPE", "/tmp/kloop-escape-marker"), "w") as handle:
        handle.write("escaped")
    out = tensor.clone()
    dist.all_reduce(out)
    return out
