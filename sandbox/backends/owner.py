"""Who owns a sandbox (a container, a local work dir), precisely enough to tell when the owner is
gone: ``host/pid/start``, the start time from /proc so that a reused pid is not taken for the owner.
Sandboxes whose owner died without closing them (SIGKILL, a crash, a power cut) are swept by the
next sandbox of their kind to start."""

from __future__ import annotations

import os
import socket


def owner() -> str:
    """This process, as the owner of what it starts (read each time: a forked child is its own owner)."""
    return f"{socket.gethostname()}/{os.getpid()}/{_start_time(os.getpid())}"


def owner_alive(value: str) -> bool:
    """Is the owner ``value`` (from ``owner()``) still running? Another host's owner is taken as alive:
    not ours to judge."""
    host, _, rest = value.strip().partition("/")
    pid, _, started = rest.partition("/")
    if host != socket.gethostname() or not pid.isdigit():
        return True
    return _start_time(int(pid)) == started and started != "?"


def _start_time(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:  # the process's name in it may be any bytes
            return handle.read().rsplit(b")", 1)[1].split()[19].decode("ascii")
    except (OSError, IndexError, UnicodeDecodeError):
        return "?"
