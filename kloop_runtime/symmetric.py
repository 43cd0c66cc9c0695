"""Symmetric buffers: one allocation per rank, every rank holding pointers to all of them.

Built on torch symmetric memory. Works with one GPU per rank (``cuda`` mode) and with several
ranks sharing one GPU (``emulate`` mode, where the harness sets
TORCH_SYMM_MEM_ALLOW_OVERLAPPING_DEVICES=1). Allocation is collective: every rank must create
the same buffers in the same order. NVLink multicast is never used.
"""

from __future__ import annotations

from typing import Sequence

import torch
import torch.distributed as dist


class SymmetricBuffer:
    """``buffer.local`` is this rank's tensor; ``buffer.peer_ptrs`` an int64 device tensor of
    every rank's base address (index by rank inside a kernel); ``buffer.signal_pad_ptrs`` the
    same for each rank's zero-initialised signal pad (uint32 flags for barriers)."""

    def __init__(self, shape: Sequence[int] | int, dtype: torch.dtype, device: torch.device | str | None = None, group=None):
        import torch.distributed._symmetric_memory as symm_mem

        if not dist.is_initialized():
            raise RuntimeError("SymmetricBuffer needs torch.distributed to be initialised (the harness does it)")
        device = torch.device(device) if device is not None else torch.device("cuda", torch.cuda.current_device())
        if device.type != "cuda":
            raise RuntimeError("symmetric memory needs CUDA tensors; run with --device cuda or --device emulate")
        group = group or dist.group.WORLD
        if hasattr(symm_mem, "enable_symm_mem_for_group"):
            try:
                symm_mem.enable_symm_mem_for_group(group.group_name)
            except Exception:  # noqa: BLE001 - newer torch needs no enabling and may refuse it twice
                pass
        shape = (shape,) if isinstance(shape, int) else tuple(shape)
        self.local = symm_mem.empty(*shape, dtype=dtype, device=device)
        self.handle = symm_mem.rendezvous(self.local, group)
        self.rank = self.handle.rank
        self.world = self.handle.world_size
        self.peer_ptrs = torch.tensor(list(self.handle.buffer_ptrs), dtype=torch.int64, device=device)
        self.signal_pad_ptrs = torch.tensor(list(self.handle.signal_pad_ptrs), dtype=torch.int64, device=device)
        self.signal_pad_bytes = int(self.handle.signal_pad_size)

    def peer(self, rank: int) -> torch.Tensor:
        """Rank ``rank``'s buffer, as a tensor this rank can read and write."""
        return self.handle.get_buffer(rank, tuple(self.local.shape), self.local.dtype)

    def barrier(self, channel: int = 0) -> None:
        """A device-side barrier among all ranks of the buffer, on the current stream."""
        self.handle.barrier(channel=channel)
