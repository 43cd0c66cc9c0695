"""A trusted process that runs candidate code below it (the harness, the agent's shell runner) ends
when its owner does, and takes everything below it along.

Such a process is started by a controller (``kloop eval``, a run, a batch, the service) that
reads its report channel, a pipe. Killed (SIGKILL, the OOM killer, a SIGTERM without a handler),
the owner can no longer end the process's session, so it, its reference group and the
candidate's jailed ranks (or the agent's command) would go on until the work in flight ended:
minutes of a GPU for a report nobody reads.

The kernel says when the reading end of a pipe has no reader left: a ``poll`` of the writing
end reports POLLERR (POLLHUP for a socket). A thread waits for that on a duplicate of the
report channel, then kills every process below this one and exits. Nothing is watched when the
channel is a file or a terminal (a person ran the process by hand). The process is a child
subreaper, so what it starts cannot leave its tree by being orphaned: ``reap_descendants``, at
the owner's loss or at the normal end, finds everything.
"""

from __future__ import annotations

import os
import select
import signal
import stat
import sys
import threading

OWNER_GONE_EXIT = 75  # EX_TEMPFAIL: nobody reads it, but a supervisor's log may
_GONE = select.POLLERR | select.POLLHUP


def end_with_owner(report_fd: int) -> threading.Thread | None:
    """Make this process a subreaper and start the watch on its report channel ``report_fd``.
    Returns the watching thread, or None where the channel cannot tell (not a pipe or socket)."""
    if sys.platform == "linux":
        from sandbox.jail import kernel

        kernel.prctl(kernel.PR_SET_CHILD_SUBREAPER, 1)
    mode = os.fstat(report_fd).st_mode
    if not (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)):
        return None
    watched = os.dup(report_fd)  # the process closes report_fd when it is done; this one is the watch's

    def watch() -> None:
        poller = select.poll()
        poller.register(watched, 0)  # no event asked: only POLLERR/POLLHUP (always reported) wake it
        while not any(flags & _GONE for _, flags in poller.poll()):
            pass
        reap_descendants()
        os._exit(OWNER_GONE_EXIT)

    thread = threading.Thread(target=watch, name="owner-lifeline", daemon=True)
    thread.start()
    return thread


def reap_descendants() -> int:
    """Kill everything below this process (orphans are re-parented here); returns how many."""
    from sandbox.jail import tree

    killed = 0
    for _ in range(100):
        children = tree.child_pids(os.getpid())
        if not children:
            break
        for pid in children:
            try:
                os.kill(pid, signal.SIGKILL)
                killed += 1
            except ProcessLookupError:
                pass
        for pid in children:
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass
    return killed
