"""A pool of GPUs that leases disjoint device sets to concurrent evaluations.

``GpuPool.parse("0,1,2,3")`` makes a pool of four devices; ``with pool.lease(2) as gpus:``
blocks (up to a timeout) until two are free, hands them out to this caller alone and returns
them on exit. The Docker backend turns a lease into a ``DeviceRequest`` for exactly those ids;
batch runs share one pool between their workers.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Sequence

import structlog

log = structlog.get_logger(__name__)


class GpuPoolError(RuntimeError):
    """A lease that cannot be granted (too many GPUs asked for, or none free in time)."""


def parse_gpu_ids(spec: str | Iterable[int | str] | None) -> tuple[str, ...]:
    """'0,1,2,3' / [0, 1] / 'GPU-uuid,...' -> ('0', '1', ...); '' or None -> ()."""
    if spec is None:
        return ()
    items = spec.split(",") if isinstance(spec, str) else list(spec)
    ids = tuple(str(item).strip() for item in items if str(item).strip())
    for gpu in ids:
        if not (gpu.isdigit() or gpu.startswith(("GPU-", "MIG-"))):
            raise GpuPoolError(f"{gpu!r} is not a GPU id: give indices like 0,1,2,3 (or GPU-/MIG- UUIDs)")
    if len(set(ids)) != len(ids):
        raise GpuPoolError(f"GPU ids repeat in {','.join(ids)}")
    return ids


def device_request(device_ids: Sequence[str]):
    """The Docker device request that passes exactly ``device_ids`` into a container (what
    ``docker run --gpus '"device=0,1"'`` sends; no driver named, so the engine picks the one
    that provides the ``gpu`` capability: the NVIDIA hook, or CDI on newer engines)."""
    import docker

    return docker.types.DeviceRequest(device_ids=[str(d) for d in device_ids], capabilities=[["gpu"]])


class GpuLease:
    """GPUs held by one caller until :meth:`release` (or the end of its ``with`` block)."""

    def __init__(self, pool: "GpuPool", device_ids: tuple[str, ...]):
        self.pool, self.device_ids = pool, device_ids
        self.released = False

    def device_request(self):
        return device_request(self.device_ids)

    def release(self) -> None:
        if not self.released:
            self.released = True
            self.pool._give_back(self.device_ids)

    def __enter__(self) -> "GpuLease":
        return self

    def __exit__(self, *exc) -> None:
        self.release()

    def __repr__(self) -> str:
        return f"GpuLease({','.join(self.device_ids)})"


class GpuPool:
    """Thread-safe; waiting callers are served first come, first served."""

    def __init__(self, device_ids: Iterable[int | str]):
        self.device_ids = parse_gpu_ids(list(device_ids))
        self._free = list(self.device_ids)
        self._cond = threading.Condition()
        self._queue: list[object] = []

    @classmethod
    def parse(cls, spec: str) -> "GpuPool":
        return cls(parse_gpu_ids(spec))

    @property
    def free(self) -> tuple[str, ...]:
        with self._cond:
            return tuple(self._free)

    def lease(self, count: int, timeout_s: float | None = None) -> GpuLease:
        """Wait until ``count`` GPUs are free (at most ``timeout_s``; None: forever) and take them."""
        if count < 1:
            raise GpuPoolError(f"a lease needs at least one GPU, not {count}")
        if count > len(self.device_ids):
            raise GpuPoolError(f"{count} GPUs asked for, the pool has {len(self.device_ids)} ({','.join(self.device_ids) or 'none'}): "
                               f"pass more with --gpus")
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        ticket = object()
        with self._cond:
            self._queue.append(ticket)
            try:
                while self._queue[0] is not ticket or len(self._free) < count:
                    remaining = None if deadline is None else deadline - time.monotonic()
                    if remaining is not None and remaining <= 0:
                        raise GpuPoolError(f"no {count} GPUs of {','.join(self.device_ids)} became free within {timeout_s:.0f} s")
                    self._cond.wait(remaining)
                taken = tuple(self._free[:count])
                del self._free[:count]
            finally:
                self._queue.remove(ticket)
                self._cond.notify_all()
        log.debug("gpus leased", gpus=taken)
        return GpuLease(self, taken)

    def _give_back(self, device_ids: tuple[str, ...]) -> None:
        with self._cond:
            self._free.extend(d for d in device_ids if d not in self._free)
            self._free.sort(key=self.device_ids.index)
            self._cond.notify_all()
        log.debug("gpus released", gpus=device_ids)
