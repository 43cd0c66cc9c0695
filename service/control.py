"""What a running job's code gets from the scheduler: its events, and its cancellation.

``control.emit(type, data)`` stores an event (the SSE stream and the web page read them);
``with control.stoppable(stop):`` registers what ends the job's processes now (a warm harness's
close, a sandbox's terminate) for the time it runs; ``control.check()`` raises
:class:`JobCancelled` once a cancel was asked for.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import structlog

from service.store import Job, Store

log = structlog.get_logger(__name__)


class JobCancelled(Exception):
    """The job was cancelled (by its owner, or the server is shutting down)."""


class JobFailed(Exception):
    """The job cannot run as asked (bad problem, no GPUs of that many, ...): its message says why."""


class JobControl:
    def __init__(self, job: Job, store: Store):
        self.job, self.store = job, store
        self.cancelled = threading.Event()
        self.reason = ""
        self._stops: list[Callable[[], None]] = []
        self._lock = threading.Lock()

    def emit(self, type_: str, data: dict[str, Any]) -> None:
        self.store.add_event(self.job.id, type_, data)

    def check(self) -> None:
        if self.cancelled.is_set():
            raise JobCancelled(self.reason or "cancelled")

    def cancel(self, reason: str = "cancelled by its owner") -> None:
        with self._lock:
            if self.cancelled.is_set():
                return
            self.reason = reason
            self.cancelled.set()
            stops = list(self._stops)
        for stop in stops:
            try:
                stop()
            except Exception as error:  # noqa: BLE001 - ending what runs is best effort; the others still run
                log.warning("stopping a job's processes failed", job=self.job.id, error=f"{type(error).__name__}: {error}")

    @contextmanager
    def stoppable(self, stop: Callable[[], None]) -> Iterator[None]:
        """While the block runs, a cancel calls ``stop`` (at once if the job is cancelled already)."""
        with self._lock:
            self._stops.append(stop)
            already = self.cancelled.is_set()
        if already:
            stop()
        try:
            yield
        finally:
            with self._lock:
                self._stops.remove(stop)
