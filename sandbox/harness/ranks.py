"""A group of rank processes (reference or candidate) driven by the harness parent.

Ranks are forked from a forkserver that has already imported torch (start-up in a fraction
of a second), each with its own private duplex pipe. Every command goes to all ranks and waits
for one reply each, serving compile requests meanwhile, noticing ranks that die, and raising
:class:`StageTimeout` when the stage's time is up (the caller then kills the group).
"""

from __future__ import annotations

import os
import signal
import threading
import time
from multiprocessing.connection import wait
from typing import Any, Callable

import structlog

from sandbox.harness import protocol as p
from sandbox.harness.compile_server import CompileServer

log = structlog.get_logger(__name__)

FAILURE_GRACE_S = 3.0  # after one rank fails, how long the others get to report before the kill


class StageTimeout(Exception):
    def __init__(self, stage: str, timeout_s: float, pending: list[int]):
        super().__init__(f"{stage} did not finish within {timeout_s:.0f} s; ranks {pending} never answered")
        self.stage, self.timeout_s, self.pending = stage, timeout_s, pending


class RankGroup:
    def __init__(self, ctx, role: p.Role, world: int, make_args: Callable[[int, int], p.WorkerArgs], compile_server: CompileServer):
        import torch.distributed as dist

        from sandbox.harness import worker

        self.role, self.world = role, world
        self.compile_server = compile_server
        self.store = dist.TCPStore("127.0.0.1", 0, None, True, wait_for_workers=False)
        self.conns, self.procs, self._send_locks = [], [], []
        for rank in range(world):
            parent_end, child_end = ctx.Pipe(duplex=True)
            proc = ctx.Process(target=worker.main, args=(child_end, make_args(rank, self.store.port)), name=f"kloop-{role}-{rank}", daemon=True)
            proc.start()
            child_end.close()
            self.conns.append(parent_end)
            self.procs.append(proc)
            self._send_locks.append(threading.Lock())
        self.closed = False

    def _send(self, rank: int, message: Any) -> None:
        with self._send_locks[rank]:
            self.conns[rank].send(message)

    def request(self, command: Any, timeout_s: float, stage: str) -> list[p.Done | p.Failed | p.Ready]:
        for rank in range(self.world):
            try:
                self._send(rank, command)
            except (BrokenPipeError, OSError):
                pass  # the rank is dead; collect() reports it
        return self.collect(timeout_s, stage)

    def collect(self, timeout_s: float, stage: str) -> list[p.Done | p.Failed | p.Ready]:
        replies: dict[int, Any] = {}
        deadline = time.monotonic() + timeout_s
        first_failure_at: float | None = None
        by_conn = {conn: rank for rank, conn in enumerate(self.conns)}
        by_sentinel = {proc.sentinel: rank for rank, proc in enumerate(self.procs)}
        while len(replies) < self.world:
            now = time.monotonic()
            limit = deadline if first_failure_at is None else min(deadline, first_failure_at + FAILURE_GRACE_S)
            if now >= limit:
                if first_failure_at is not None:
                    break
                raise StageTimeout(stage, timeout_s, sorted(set(range(self.world)) - set(replies)))
            waitables = [c for c, r in by_conn.items() if r not in replies] + [s for s, r in by_sentinel.items() if r not in replies]
            for ready in wait(waitables, timeout=limit - now):
                if ready in by_conn:
                    rank = by_conn[ready]
                    try:
                        message = ready.recv()
                    except (EOFError, OSError):
                        # EOF: the rank closed its end, i.e. died (OOM kill, os._exit) without a reply.
                        # Record it here: its sentinel defers to the readable conn and would wait forever.
                        self.procs[rank].join(1.0)
                        replies[rank] = p.Failed(rank, "call", f"rank {rank} died ({_exit_reason(self.procs[rank].exitcode)})")
                        if first_failure_at is None:
                            first_failure_at = time.monotonic()
                        continue
                    if isinstance(message, p.CompileRequest):
                        self._serve_compile(rank, message)
                        continue
                    replies[rank] = message
                else:
                    rank = by_sentinel[ready]
                    if rank in replies:
                        continue
                    if self.conns[rank].poll(0):
                        continue  # read its last words first
                    replies[rank] = p.Failed(rank, "call", f"rank {rank} died ({_exit_reason(self.procs[rank].exitcode)})")
                if rank in replies and isinstance(replies[rank], p.Failed) and first_failure_at is None:
                    first_failure_at = time.monotonic()
        for rank in range(self.world):
            replies.setdefault(rank, p.Failed(rank, "call", f"rank {rank} stopped answering after another rank failed"))
        return [replies[rank] for rank in range(self.world)]

    def _serve_compile(self, rank: int, request: p.CompileRequest) -> None:
        future = self.compile_server.submit(request)

        def reply(done) -> None:
            result = done.result()
            try:
                self._send(rank, p.CompileReply(request.request_id, result.ok, result.path, result.log))
            except (BrokenPipeError, OSError):
                pass

        future.add_done_callback(reply)

    def close(self, timeout_s: float = 10.0) -> None:
        """Ask ranks to exit, then kill whatever is left."""
        if self.closed:
            return
        for rank in range(self.world):
            try:
                self._send(rank, p.Exit())
            except (BrokenPipeError, OSError):
                pass
        deadline = time.monotonic() + timeout_s
        for proc in self.procs:
            proc.join(max(deadline - time.monotonic(), 0.05))
        self.kill()

    def kill(self) -> None:
        for proc in self.procs:
            if proc.is_alive():
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
                try:
                    os.kill(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        for proc in self.procs:
            proc.join(5)
        for conn in self.conns:
            conn.close()
        self.closed = True


def _exit_reason(code: int | None) -> str:
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"
