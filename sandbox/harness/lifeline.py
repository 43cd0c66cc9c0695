"""The harness ends when its owner does.

A harness is started by a controller (``kloop eval``, a batch, the service) that reads its
report channel, a pipe. Killed (SIGKILL, the OOM killer, a SIGTERM without a handler), the
owner can no longer end the harness's session, so the harness, its reference group and the
candidate's jailed ranks would go on until the evaluation in flight ended (minutes of a GPU,
for a report nobody reads; a warm harness waits for its next request after that).

The kernel says when the reading end of a pipe has no reader left: a ``poll`` of the writing
end reports POLLERR (POLLHUP for a socket). A thread waits for that on a duplicate of the
report channel and then kills every process below this one, as the harness does at its normal
end, and exits. Nothing is watched when the channel is a file or a terminal (a person ran
the harness by hand).
"""

from __future__ import annotations

import os
import select
import stat
import threading

OWNER_GONE_EXIT = 75  # EX_TEMPFAIL: nobody reads it, but a supervisor's log may
_GONE = select.POLLERR | select.POLLHUP


def watch_owner(report_fd: int, end_everything) -> threading.Thread | None:
    """Start the watch on the report channel ``report_fd``; ``end_everything()`` kills every
    process below this one. Returns the thread, or None where the channel cannot tell."""
    mode = os.fstat(report_fd).st_mode
    if not (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)):
        return None
    watched = os.dup(report_fd)  # the harness closes report_fd when it is done; this one is the watch's

    def watch() -> None:
        poller = select.poll()
        poller.register(watched, 0)  # no event asked: only POLLERR/POLLHUP (always reported) wake it
        while True:
            events = [flags for _, flags in poller.poll()]
            if any(flags & _GONE for flags in events):
                break
        end_everything()
        os._exit(OWNER_GONE_EXIT)

    thread = threading.Thread(target=watch, name="owner-lifeline", daemon=True)
    thread.start()
    return thread
