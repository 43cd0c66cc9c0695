"""Confinement of candidate rank processes: Landlock, an audit hook, rlimits, non-dumpable.

Candidate code is hostile. Inside a rank process, after the trusted harness code has set up
the device and the process group and before the candidate is imported, :func:`confine`
- restricts the filesystem with Landlock (where the kernel has it): write only under the
  candidate's own work dir and /dev; read only system, Python and CUDA folders and the
  compile cache. The reference cache, the user's home and the project's checkout are out of
  reach. Children inherit the restriction.
- forbids signals to processes outside the confined group (Landlock ABI 6), so the candidate
  cannot kill or stop the harness.
- installs an audit hook that refuses writes outside the work dir and network connections to
  anything but loopback, and records each attempt as a violation (reported as ``rejected``).
The Docker backend adds a container around all of this.
"""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path

import structlog

from sandbox.jail import kernel, landlock

log = structlog.get_logger(__name__)

def landlock_abi() -> int:
    """The kernel's Landlock ABI version, 0 where there is none."""
    return landlock.abi()


def apply_landlock(read_paths: list[str], write_paths: list[str]) -> int:
    """Restrict this process (and its future children) to reading ``read_paths`` and writing
    under ``write_paths``; signals only inside the domain. Returns the ABI used, 0 if the kernel
    has no Landlock. (The Landlock code lives in sandbox.jail.landlock.)"""
    return landlock.abi() if landlock.restrict(read_paths, write_paths, scope_abstract_unix=False) else 0


def set_non_dumpable() -> None:
    """Make /proc/<pid>/{fd,mem,environ} of this process unreachable to other processes of
    the same user (the candidate runs as the same user in the local backend)."""
    if sys.platform == "linux":
        kernel.prctl(kernel.PR_SET_DUMPABLE, 0)


def system_read_paths() -> list[str]:
    """Folders a Python + torch + CUDA process needs to read."""
    paths = {"/usr", "/lib", "/lib32", "/lib64", "/bin", "/sbin", "/etc", "/opt", "/proc", "/sys", "/dev", "/run/nvidia-persistenced"}
    paths |= {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    for entry in sys.path:
        if entry and os.path.isdir(entry) and ("site-packages" in entry or "dist-packages" in entry):
            paths.add(entry)
    cuda_home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    if cuda_home:
        paths.add(cuda_home)
    for name in ("kloop_runtime", "sandbox", "problems"):  # our own public packages, not the checkout around them
        module = sys.modules.get(name)
        if module is not None and getattr(module, "__file__", None):
            paths.add(str(Path(module.__file__).parent))
    return sorted(p for p in paths if os.path.exists(p))


class AuditGuard:
    """Refuses (and records) writes outside the allowed folders and non-loopback connections."""

    def __init__(self, writable: list[str]):
        self.writable = [os.path.realpath(p) for p in writable]
        self.violations: list[str] = []

    def _outside(self, path: str) -> bool:
        full = os.path.realpath(os.path.join(os.getcwd(), path))
        return not any(full == w or full.startswith(w + os.sep) for w in self.writable)

    def __call__(self, event: str, args: tuple) -> None:
        if event == "open":
            path, mode, flags = args
            if not isinstance(path, (str, bytes)):
                return
            path = os.fsdecode(path)
            writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
                isinstance(flags, int) and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND)
            )
            if writing and self._outside(path):
                self._refuse(f"write to {path} outside the work dir")
        elif event in ("socket.connect", "socket.sendto"):
            address = args[1]
            host = address[0] if isinstance(address, tuple) else address
            if isinstance(host, str) and not _is_loopback(host):
                self._refuse(f"network connection to {host}")

    def _refuse(self, what: str) -> None:
        self.violations.append(what)
        raise PermissionError(f"kernel-loop sandbox: {what} is not allowed")


def _is_loopback(host: str) -> bool:
    if host.startswith("/") or host.startswith("\0") or host == "":
        return True  # unix sockets (NCCL, symmetric memory handle exchange)
    try:
        return socket.inet_pton(socket.AF_INET, host)[0] == 127
    except OSError:
        return host in ("::1", "localhost")


def confine(workdir: Path, compile_cache: Path | None, extra_read: tuple[str, ...] = ()) -> tuple[AuditGuard, list[str]]:
    """Confine this (candidate) process. Returns the audit guard and the measures applied."""
    writable = [str(workdir), "/dev"]
    readable = system_read_paths() + list(extra_read)
    if compile_cache is not None:
        readable.append(str(compile_cache))
    measures = ["env-allowlist", "rlimits", "audit-hook", "non-dumpable"]
    set_non_dumpable()
    try:
        abi = apply_landlock(readable, writable)
        if abi:
            measures.append(f"landlock-abi{abi}")
    except OSError as error:
        log.warning("landlock unavailable", error=str(error))
    guard = AuditGuard(writable)
    sys.addaudithook(guard)
    return guard, measures
