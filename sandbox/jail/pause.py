"""Stopping a jailed tree for a while, whole: every process below the jail's own two (the keeper
and the supervisor), however it forked or left its session, gets SIGSTOP, and SIGCONT after.

The judge stops the candidate's ranks while it times the reference: a thread or a forked
spinner that a candidate leaves burning the host's cores between its own rounds would slow the
reference's calls and inflate its harness cost, which the parent's clock takes out of the
candidate's (tests/fixtures/hostile/inflate_reference_overhead.py). A stopped process cannot
fork, so sweeping the tree until a sweep made once everything found has stopped finds nothing
new leaves no process of it running. Work already queued on a GPU is not stopped (the reference
timed alone covers it).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator

import psutil
import structlog

from sandbox.jail import tree

log = structlog.get_logger(__name__)

_STOPPED_STATES = ("T", "t", "Z", "X")  # stopped, traced-stopped, zombie, dead (proc(5): stat's state)
MAX_SWEEPS = 50  # a tree that still grows after this many sweeps is left as it is (and the caller told)
STOP_WAIT_S = 1.0  # how long to wait for SIGSTOP to take hold of every process swept


class PauseFailed(Exception):
    """The tree could not be stopped whole (no permission, or it kept growing)."""


def _below(root_pid: int, spared: set[int]) -> list[psutil.Process]:
    return [p for p in tree.descendants(root_pid) if p.pid not in spared]


def stop_tree(root_pid: int) -> list[psutil.Process]:
    """SIGSTOP to every process below ``root_pid`` and its direct children (the jail's keeper
    and supervisor, which stay up to end the tree); returns them, all stopped. Raises
    PauseFailed, after resuming what it stopped, when that cannot be done. Sweeps until one finds
    nothing new once everything found has stopped: a process signalled may fork before the stop
    takes it (the later on a busy host), and a tree read while it runs may miss a process."""
    spared = {root_pid, *tree.child_pids(root_pid)}
    stopped: dict[int, psutil.Process] = {}
    try:
        settled = False
        for _ in range(MAX_SWEEPS):
            fresh = [p for p in _below(root_pid, spared) if p.pid not in stopped]
            if fresh:
                settled = False
                for process in fresh:
                    with contextlib.suppress(psutil.NoSuchProcess):
                        process.suspend()
                        stopped[process.pid] = process
            elif settled:
                break
            else:
                _wait_stopped(list(stopped.values()))
                settled = True
        else:
            raise PauseFailed(f"the tree was still growing after {MAX_SWEEPS} sweeps")
    except psutil.AccessDenied as error:
        resume(list(stopped.values()))
        raise PauseFailed(f"no permission to stop pid {error.pid}") from None
    except PauseFailed:
        resume(list(stopped.values()))
        raise
    return list(stopped.values())


ASLEEP_WINDOW_S = 0.1  # a thread still in uninterruptible sleep after the wait must use no CPU time over this long
ASLEEP_AFTER_S = 0.02  # how soon a process whose running threads are all in uninterruptible sleep is tested for being asleep


def _wait_stopped(processes: list[psutil.Process]) -> None:
    """Every thread of ``processes`` stopped, or asleep (state D, no CPU time used over
    ASLEEP_WINDOW_S): a thread in uninterruptible sleep does not run, and the pending stop takes
    it when it wakes. A process held in that sleep for good (a vfork parent whose child never
    execs: tests/fixtures/hostile/pause_defeated_by_vfork.py) made every pause fail, and the whole
    tree, its spinners too, ran on while the reference was timed; a thread that runs in the
    kernel instead (pause_dodged_by_zombie_leader.py) is not asleep, and one still running after
    STOP_WAIT_S fails the pause. A process all of whose threads still running are in that sleep is
    tested for it after ASLEEP_AFTER_S, not after STOP_WAIT_S: the test is the same, and a pause of
    a tree holding a vfork parent took 1.10 s instead of 0.12 s, at every pause (a CPU evaluation
    pauses before each of its input checks)."""
    started = time.monotonic()
    for process in processes:
        while running := _running_threads(process.pid):
            waited = time.monotonic() - started
            if waited > ASLEEP_AFTER_S and all(state == "D" for state, _ in running.values()) and _asleep(process.pid):
                break
            if waited > STOP_WAIT_S:
                if _asleep(process.pid):
                    break
                raise PauseFailed(f"pid {process.pid} did not stop within {STOP_WAIT_S:g} s")
            time.sleep(0.0005)


def _asleep(pid: int) -> bool:
    before = _running_threads(pid)
    if any(state != "D" for state, _ in before.values()):
        return False
    time.sleep(ASLEEP_WINDOW_S)
    after = _running_threads(pid)
    return all(state == "D" and after[tid][1] == before.get(tid, ("", -1))[1] for tid, (state, _) in after.items())


def _running_threads(pid: int) -> dict[str, tuple[str, int]]:
    """The threads of ``pid`` that are not stopped, traced-stopped or gone: their state and CPU
    time in clock ticks. Each thread's own state, not the process's, which is its first thread's:
    that thread may have exited alone (a zombie, to psutil) while the others run on, in a kernel
    call that a pending stop does not interrupt (tests/fixtures/hostile/pause_dodged_by_zombie_leader.py
    burned every core that way). The file is read as bytes: the thread's name in it is the
    candidate's, any bytes, and a name that was not UTF-8 once made the read fail and the thread
    count as gone while it burned every core (pause_dodged_by_thread_name.py). A thread whose state
    cannot be read, for any reason but its end, counts as running."""
    try:
        threads = os.listdir(f"/proc/{pid}/task")
    except (FileNotFoundError, ProcessLookupError):
        return {}
    running = {}
    for thread in threads:
        try:
            with open(f"/proc/{pid}/task/{thread}/stat", "rb") as handle:
                fields = handle.read().rpartition(b")")[2].split()  # after the name: state, ppid, ... utime (12th), stime (13th)
        except (FileNotFoundError, ProcessLookupError):
            continue  # gone meanwhile
        except OSError:
            fields = []
        try:
            state, ticks = fields[0].decode("ascii"), int(fields[11]) + int(fields[12])
        except (IndexError, ValueError):
            state, ticks = "?", -1  # unreadable: running, for all the pause can tell
        if state not in _STOPPED_STATES:
            running[thread] = (state, ticks)
    return running


def resume(processes: list[psutil.Process]) -> None:
    for process in processes:
        with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
            process.resume()


@contextlib.contextmanager
def paused(root_pid: int) -> Iterator[str | None]:
    """The tree below ``root_pid`` stopped for the block; yields None, or why it could not be
    stopped (the block then runs with the tree going on)."""
    try:
        processes = stop_tree(root_pid)
    except PauseFailed as error:
        log.warning("jail_pause_failed", root_pid=root_pid, reason=str(error))
        yield str(error)
        return
    try:
        yield None
    finally:
        resume(processes)
