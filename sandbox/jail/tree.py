"""The processes below a pid, from the kernel's own list of each thread's children
(``/proc/PID/task/TID/children``): no scan of every process on the host, which psutil makes for
``children()`` (about 1 ms a call on an idle two-core host, and it grows with the host's
processes). psutil's scan where the kernel keeps no such list (CONFIG_PROC_CHILDREN off).

Either way a tree read while it runs is a snapshot: a child made or ended meanwhile may be
missed. Whoever must see a whole tree looks again once what it found can no longer fork
(sandbox/jail/pause.py).
"""

from __future__ import annotations

import os

import psutil


_KERNEL_LISTS = os.path.exists(f"/proc/{os.getpid()}/task/{os.getpid()}/children")


def child_pids(pid: int) -> list[int]:
    """``pid``'s children (of every one of its threads); [] when it is gone."""
    if not _KERNEL_LISTS:
        try:
            return [child.pid for child in psutil.Process(pid).children()]
        except psutil.Error:
            return []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    found: set[int] = set()
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/children") as handle:
                found.update(int(child) for child in handle.read().split())
        except OSError:
            continue  # a thread that ended meanwhile (its children went to another thread of the process)
    return sorted(found)


def children(pid: int) -> list[psutil.Process]:
    found = []
    for child in child_pids(pid):
        try:
            found.append(psutil.Process(child))
        except psutil.Error:
            continue
    return found


def descendants(pid: int) -> list[psutil.Process]:
    """Every process below ``pid``, parents before their children."""
    found: list[psutil.Process] = []
    pending = [pid]
    while pending:
        below = children(pending.pop())
        found += below
        pending += [process.pid for process in below]
    return found
