"""Wait until file descriptors are readable, for any descriptor number.

``select.select`` refuses descriptors above ``FD_SETSIZE`` (1024), which a busy process (a
test run, the service) passes easily; ``poll`` has no such limit. Standard library only: the
jail's init and the rank processes import this too.
"""

from __future__ import annotations

import select
from typing import Any


def _fd(item: Any) -> int:
    return item if isinstance(item, int) else item.fileno()


def wait_readable(items: list[Any], timeout_s: float | None) -> list[Any]:
    """The subset of ``items`` (descriptors or objects with ``fileno()``) that is readable (or
    closed) within ``timeout_s`` seconds; ``None`` waits without limit, 0 only looks."""
    if not items:
        return []
    poller = select.poll()
    by_fd: dict[int, list[Any]] = {}
    for item in items:
        fd = _fd(item)
        by_fd.setdefault(fd, []).append(item)
        poller.register(fd, select.POLLIN | select.POLLPRI)
    timeout_ms = None if timeout_s is None else max(0, int(timeout_s * 1000 + 0.999))
    events = poller.poll(timeout_ms)
    return [item for fd, _ in events for item in by_fd.get(fd, [])]
