"""A group of rank processes (reference or candidate) driven by the harness parent.

The parent makes one SEQPACKET socketpair and one log pipe per rank, starts the group's zygote
with the child ends (the candidate's inside its jail), and keeps the other ends: there is no
socket anyone can connect to. Every command goes to all ranks and waits for one reply each,
validated (sandbox.harness.messages), serving compile requests meanwhile, noticing ranks that
die, and raising :class:`StageTimeout` when the stage's time is up (the caller then kills the
group: the whole tree ends with its zygote or jail). What ranks print is read through pipes and
capped as it is read (head and tail kept).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog

from sandbox.backends.base import CappedReader
from sandbox.harness import messages as m
from sandbox.harness.compile_server import CompileServer
from sandbox.harness.memory_watch import MemoryWatch
from sandbox.jail import pause
from sandbox.rank.wire import Channel, ChannelClosed, WireError, check_sealed, close_received
from sandbox.readiness import wait_readable
from sandbox.report import inert

log = structlog.get_logger(__name__)

FAILURE_GRACE_S = 3.0  # after one rank fails, how long the others get to report before the kill
# A rank reads each command (and each compile reply) before the parent sends the next, so the parent's sends never wait
# on a rank that serves; one whose channel stays full this long is not reading it (see RankGroup.send)
SEND_TIMEOUT_S = 10.0
LOG_LIMIT_BYTES = 2 * 2**20


class StageTimeout(Exception):
    def __init__(self, stage: str, timeout_s: float, pending: list[int]):
        super().__init__(f"{stage} did not finish within {timeout_s:.0f} s; ranks {pending} never answered")
        self.stage, self.timeout_s, self.pending = stage, timeout_s, pending


@dataclass
class RankFailure:
    """A rank that raised, died or broke the protocol."""

    rank: int
    kind: str  # build, call, harness, died, violation
    message: str
    text: str = ""


@dataclass
class Answer:
    """One rank's reply to a command, and the descriptors that came with it (owned by the caller)."""

    rank: int
    reply: m.Reply
    fds: list[int] = field(default_factory=list)


class RankGroup:
    """``launch(argv, pass_fds, log_fd) -> process`` starts the zygote (``process.kill()``,
    ``process.poll()``, ``process.measures``) with ``argv`` = [its JSON config]."""

    def __init__(self, role: str, world: int, config: dict[str, Any],
                 launch: Callable[[list[str], list[int], int], Any], compile_server: CompileServer | None):
        self.role, self.world = role, world
        self.compile_server = compile_server
        self.spent_s: dict[str, float] = {}  # wall seconds per command type, asked to answered
        self.channels: list[Channel] = []
        self.readers: list[CappedReader] = []
        child_fds, entries = [], []
        for rank in range(world):
            parent_end, child_end = Channel.pair()
            parent_end.sock.settimeout(SEND_TIMEOUT_S)
            channel_fd = child_end.sock.detach()  # a plain descriptor, closed below once the child has it
            log_read, log_write = os.pipe()
            self.channels.append(parent_end)
            self.readers.append(CappedReader(os.fdopen(log_read, "rb", buffering=0), LOG_LIMIT_BYTES))
            child_fds += [channel_fd, log_write]
            entries.append({"rank": rank, "channel": channel_fd, "log": log_write})
        zygote_read, zygote_write = os.pipe()
        self.zygote_log = CappedReader(os.fdopen(zygote_read, "rb", buffering=0), LOG_LIMIT_BYTES)
        try:
            self.process = launch([json.dumps({**config, "world": world, "ranks": entries})], child_fds, zygote_write)
        finally:
            for fd in child_fds + [zygote_write]:
                os.close(fd)
        for reader in [*self.readers, self.zygote_log]:
            reader.start()
        self.alive = [True] * world
        self.deaf = [False] * world  # stopped reading its channel (a send to it timed out)
        self.closed = False
        self._kill_lock = threading.Lock()
        self.overheads: list[float] | None = None  # each rank's empty timed interval, once it said it is ready
        self.device_barrier = False
        self.walled_off = False  # every rank in a Landlock domain of its own (sandbox/rank/zygote.py)
        self.flush_ms = 0.0  # one L2 flush's device time, as its ranks measured (the most; 0: no GPU flush)
        self.loaded = False  # its module is imported (a reference group kept warm stays loaded)
        self.healthy = True  # nothing went wrong with it (only a healthy reference group is kept)
        self.kept_alone: dict[tuple, Any] = {}  # a kept reference group's time alone, by timing plan (sandbox/harness/warm.py)
        self.workdir: Path | None = None
        self.stopped_for: str | None = None  # why the harness stopped a rank of this group on its own (memory)
        self.memory_watch: MemoryWatch | None = None

    # ---------------------------------------------------------------- messaging
    def took_ready(self, ready: list) -> None:
        """What its ranks said once started (``Ready`` answers): each rank's empty timed interval,
        whether they have a device barrier, how long one L2 flush keeps their GPUs busy, whether
        each is walled off from the others."""
        self.overheads = [a.reply.overhead_ms for a in ready]
        self.device_barrier = all(a.reply.device_barrier for a in ready)
        self.flush_ms = max(a.reply.flush_ms for a in ready)
        self.walled_off = all(a.reply.walled_off for a in ready)

    def send(self, rank: int, message: dict[str, Any], fds: list[int] = ()) -> None:
        """``message`` to ``rank``, waiting at most SEND_TIMEOUT_S for room on its channel: a rank
        that stops reading it (while it floods the parent with compile requests, say) would
        otherwise hold the parent in a blocking send for ever, where no stage timeout is looked at
        (tests/fixtures/hostile/unread_compile_replies.py hung the harness until its caller killed
        it); such a rank is counted as gone, and reported as not reading."""
        if not self.alive[rank]:
            return
        try:
            self.channels[rank].send(message, fds)
        except TimeoutError:
            self.alive[rank] = False
            self.deaf[rank] = True
        except (ChannelClosed, OSError):
            self.alive[rank] = False

    def ask(self, message: dict[str, Any] | list[dict[str, Any]], expect: type[m.Reply], timeout_s: float, stage: str,
            fds: list[list[int]] | None = None) -> list[Answer | RankFailure]:
        """Send ``message`` (one for all, or one per rank) and collect one reply per rank."""
        self.check_quiet()
        started = time.perf_counter()
        for rank in range(self.world):
            self.send(rank, message[rank] if isinstance(message, list) else message, fds[rank] if fds else ())
        try:
            return self.collect(expect, timeout_s, stage)
        finally:
            kind = str((message[0] if isinstance(message, list) else message).get("type"))
            self.spent_s[kind] = self.spent_s.get(kind, 0.0) + time.perf_counter() - started

    def check_quiet(self) -> None:
        """Nothing may be waiting from a rank between commands: an unasked message is a
        protocol violation (a rank answering for a call it was not yet given, say)."""
        live = [c for r, c in enumerate(self.channels) if self.alive[r]]
        ready = wait_readable(live, 0)
        for channel in ready:
            rank = self.channels.index(channel)
            try:
                pending = channel.sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
            except OSError:
                continue
            if not pending:
                self.alive[rank] = False  # closed: collect() reports the death
                continue
            raise m.ProtocolViolation(f"rank {rank} sent a message nobody asked for")

    def collect(self, expect: type[m.Reply], timeout_s: float, stage: str) -> list[Answer | RankFailure]:
        answers: dict[int, Answer | RankFailure] = {}
        deadline = time.monotonic() + timeout_s
        first_failure: float | None = None
        for rank in range(self.world):
            if not self.alive[rank]:
                answers[rank] = self._gone(rank)
                first_failure = first_failure or time.monotonic()
        while len(answers) < self.world:
            now = time.monotonic()
            limit = deadline if first_failure is None else min(deadline, first_failure + FAILURE_GRACE_S)
            if now >= limit:
                if first_failure is not None:
                    break
                self.healthy = False
                raise StageTimeout(stage, timeout_s, sorted(set(range(self.world)) - set(answers)))
            waiting = {c.fileno(): r for r, c in enumerate(self.channels) if r not in answers}
            ready = wait_readable(list(waiting), limit - now)
            for fd in ready:
                rank = waiting[fd]
                answer = self._receive(rank, expect)
                if answer is None:
                    continue  # a compile request, served
                answers[rank] = answer
                if isinstance(answer, RankFailure) and first_failure is None:
                    first_failure = time.monotonic()
        for rank in range(self.world):
            answers.setdefault(rank, RankFailure(rank, "died", f"rank {rank} stopped answering after another rank failed"))
        if first_failure is not None:
            self.healthy = False
        return [answers[rank] for rank in range(self.world)]

    def _receive(self, rank: int, expect: type[m.Reply]) -> Answer | RankFailure | None:
        try:
            message, fds = self.channels[rank].recv()
        except ChannelClosed:
            self.alive[rank] = False
            return RankFailure(rank, "died", self._death(rank))
        except WireError as error:
            return RankFailure(rank, "violation", f"rank {rank} broke the wire format: {error}")
        try:
            reply = m.parse_reply(message)
            if fds and not reply.carries_fds:
                raise m.ProtocolViolation(f"rank {rank} sent {len(fds)} descriptors with {reply.type!r}, which carries none")
            if isinstance(reply, m.CompileRequest):
                self._serve_compile(rank, reply)
                _close(fds)
                return None if self.alive[rank] else self._gone(rank)
            if isinstance(reply, m.Failed):
                _close(fds)
                # a rank's words go into the verdict's message: control characters made visible there, as in logs
                return RankFailure(rank, reply.kind, inert(reply.message), reply.text)
            if not isinstance(reply, expect):
                raise m.ProtocolViolation(f"rank {rank} answered {reply.type!r} where {expect.__name__} was due")
            if reply.sealed_copies:
                _check_sealed(rank, fds)
        except m.ProtocolViolation as violation:
            _close(fds)
            return RankFailure(rank, "violation", str(violation))
        return Answer(rank, reply, fds)

    def _serve_compile(self, rank: int, request: m.CompileRequest) -> None:
        if self.compile_server is None:
            self.send(rank, {"type": "compiled", "id": request.id, "ok": False, "log": "compiling is not available here"})
            return
        result = self.compile_server.build(request.kind, request.payload)
        self.send(rank, {"type": "compiled", "id": request.id, "ok": result.ok, "path": result.path, "log": result.log[-100_000:]})

    def _gone(self, rank: int) -> RankFailure:
        """Why a rank no longer counts: it stopped reading its channel, or it ended."""
        if self.deaf[rank]:
            return RankFailure(rank, "violation", f"rank {rank} stopped reading the harness's messages (its channel stayed "
                                                  f"full for {SEND_TIMEOUT_S:g} s)")
        return RankFailure(rank, "died", self._death(rank))

    def _death(self, rank: int) -> str:
        code = self.process.poll()
        where = "" if code is None else f"; its group's launcher exited with code {code}"
        return f"rank {rank} ended without answering (killed, out of memory, or os._exit){where}"

    def watch_memory(self, limit_bytes: int, workdir_bytes: int | None = None) -> None:
        """Stop any rank whose processes hold more than ``limit_bytes`` of host memory, and the
        whole group once its work folder holds more than ``workdir_bytes``
        (sandbox/harness/memory_watch.py); ``stopped_for`` then says which and how much."""
        if self.memory_watch is None and not self.closed:
            workdir = (str(self.workdir), workdir_bytes) if self.workdir is not None and workdir_bytes else None
            self.memory_watch = MemoryWatch(self.process.pid, self.world, limit_bytes, self._stopped, workdir).start()

    def _stopped(self, reason: str) -> None:
        self.stopped_for = reason
        self.healthy = False

    # ---------------------------------------------------------------- logs and lifecycle
    def rank_log(self, rank: int) -> str:
        return self.readers[rank].text()

    def launcher_log(self) -> str:
        return self.zygote_log.text()

    @property
    def pausable(self) -> bool:
        """Whether :meth:`paused` can stop this group (a jailed one, not yet ended)."""
        return bool(getattr(self.process, "pausable", False)) and not self.closed

    @contextlib.contextmanager
    def paused(self) -> Iterator[str | None]:
        """Every process of this group stopped for the block (a jailed group; others go on), its
        memory watch quiet meanwhile; the block gets None, or why the group could not be stopped."""
        if not self.pausable:
            yield None
            return
        with pause.paused(self.process.pid) as failed:
            with self.memory_watch.quiet() if failed is None and self.memory_watch is not None else contextlib.nullcontext():
                yield failed

    def close(self) -> None:
        """End the whole tree at once: ranks keep nothing worth a graceful exit (their output is
        already in the pipes, and the driver frees what a killed process held on the GPU)."""
        self.kill()

    def kill(self) -> None:
        with self._kill_lock:  # a warm group may be ended by two threads at once (sandbox/harness/warm.py)
            if self.closed:
                return
            if self.memory_watch is not None:
                self.memory_watch.stop()
            self.process.kill()
            for channel in self.channels:
                channel.close()
            for reader in [*self.readers, self.zygote_log]:
                reader.join(2.0)
            self.closed = True


def _check_sealed(rank: int, fds: list[int]) -> None:
    """A rank's copies of what it committed to, sealed when its reply arrives, not later: a copy
    left writable could be filled after the call ended, by this rank or another still running."""
    for fd in fds:
        try:
            check_sealed(fd, m.MAX_SEALED_BYTES)
        except WireError as error:
            raise m.ProtocolViolation(f"rank {rank} sent a copy of a call's bytes that is not sealed ({error})") from None


def _close(fds: list[int]) -> None:
    """Descriptors a rank sent, closed without waiting on any (sandbox.rank.wire.close_received)."""
    for fd in fds:
        close_received(fd)


def close_answers(answers: list[Answer | RankFailure]) -> None:
    for answer in answers:
        if isinstance(answer, Answer):
            _close(answer.fds)
            answer.fds = []
