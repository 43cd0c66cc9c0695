"""The rank's own CUDA kernels (:file:`rank_kernels.cu`): the tree digest's leaf hash
(commitment.py) and the input mask's keystream (input_mask.py).

Both run in every timed call, so their host cost is part of the harness's own cost of a call, which
bounds how fine the parent's clock resolves work hidden after a timer. They are compiled together,
once a process, with NVRTC (``torch.cuda._compile_kernel``: a few hundred ms, paid when a rank or the
parent starts, not in a call), and launched through kloop_runtime's driver launcher, which packs
parameters into a buffer kept with the kernel. torch's own launcher opened libcuda (``ctypes.CDLL``)
and looked the current device up on every launch: in a py-spy profile of 8 warm evaluations on an
H100 on 2026-12-07 that was half of a commitment's host time, and the mask, made of torch operations
on a new generator, took more than the commitment did.

Imported by rank processes and by the parent: the standard library, torch and kloop_runtime only (lazily).
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

SOURCE = Path(__file__).with_name("rank_kernels.cu")
THREADS = 128
_kernels: dict[str, Any] = {}
_module: list[Any] = []  # torch's kernel object, which holds the loaded module that the launchers use
_lock = threading.Lock()


def kernel(name: str):
    """The kernel ``name`` of rank_kernels.cu, every kernel of it compiled on the first call."""
    with _lock:
        if not _kernels:
            import torch

            from kloop_runtime.driver import CudaKernel

            compiled = torch.cuda._compile_kernel(SOURCE.read_text(), "kloop_leaf_sha256")
            _module.append(compiled)
            _kernels.update({n: CudaKernel(compiled.module, n) for n in ("kloop_leaf_sha256", "kloop_mask_chacha20")})
        return _kernels[name]


def warm() -> None:
    """Compile the kernels now, not in a call."""
    kernel("kloop_leaf_sha256")


def launch(name: str, threads: int, args: list, device) -> None:
    """``name`` over ``threads`` threads (blocks of THREADS) on ``device``'s current stream."""
    import torch

    kernel(name)((-(-threads // THREADS), 1, 1), (THREADS, 1, 1), args, stream=torch.cuda.current_stream(device))
