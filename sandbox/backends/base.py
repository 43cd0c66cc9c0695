"""The sandbox interface: a session with a work dir, commands run with a timeout, files put
and fetched, and an explicit lifecycle (``start`` ... ``close``, or a ``with`` block)."""

from __future__ import annotations

import abc
import os
import threading
from typing import IO

from pydantic import BaseModel

MAX_OUTPUT_BYTES = 8 * 2**20


class SandboxError(RuntimeError):
    """The sandbox itself failed (not the code in it); the message says what to do."""


class ExecResult(BaseModel):
    returncode: int
    stdout: str
    stderr: str
    timed_out: bool = False
    duration_s: float = 0.0
    truncated: bool = False

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out


class Sandbox(abc.ABC):
    """One isolated session. ``workdir`` is where commands start and where relative paths of
    ``write_file``/``read_file`` point; ``python`` is the interpreter that runs the harness."""

    name: str = "sandbox"
    workdir: str
    python: str
    isolation: tuple[str, ...] = ()

    @abc.abstractmethod
    def start(self) -> None: ...

    @abc.abstractmethod
    def exec(self, cmd: list[str], timeout_s: float, env: dict[str, str] | None = None, input: bytes | None = None,
             cwd: str | None = None) -> ExecResult:
        """Run ``cmd`` in ``cwd`` (relative to the work dir; the work dir itself by default)."""

    @abc.abstractmethod
    def write_file(self, path: str, content: bytes | str) -> None: ...

    @abc.abstractmethod
    def read_file(self, path: str, max_bytes: int = MAX_OUTPUT_BYTES) -> bytes: ...

    @abc.abstractmethod
    def close(self) -> None: ...

    def terminate(self) -> None:
        """End everything running in the sandbox now; callable from any thread (a cancelled job).
        By default the sandbox is closed; backends that can keep it usable override this."""
        self.close()

    def __enter__(self) -> "Sandbox":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class CappedBuffer:
    """Keeps at most ``limit`` bytes of a stream: its head and its tail, counting what fell out."""

    def __init__(self, limit: int):
        self.half = max(limit // 2, 1)
        self.head = bytearray()
        self.tail = bytearray()
        self.dropped = 0

    def add(self, chunk: bytes) -> None:
        if len(self.head) < self.half:
            take = chunk[: self.half - len(self.head)]
            self.head += take
            chunk = chunk[len(take):]
        if chunk:
            self.tail += chunk
            if len(self.tail) > self.half:
                self.dropped += len(self.tail) - self.half
                del self.tail[: len(self.tail) - self.half]

    def bytes(self) -> bytes:
        return bytes(self.head) + bytes(self.tail)

    def text(self) -> str:
        middle = f"\n[... {self.dropped} bytes dropped ...]\n".encode() if self.dropped else b""
        return (bytes(self.head) + middle + bytes(self.tail)).decode(errors="replace")


class CappedReader(threading.Thread):
    """Drains a pipe in the background into a :class:`CappedBuffer` of ``limit`` bytes (head and tail)."""

    def __init__(self, stream: IO[bytes], limit: int = MAX_OUTPUT_BYTES):
        super().__init__(daemon=True)
        self.stream, self.limit = stream, limit
        self.buffer = CappedBuffer(limit)

    @property
    def dropped(self) -> int:
        return self.buffer.dropped

    def run(self) -> None:
        while chunk := self.stream.read1(65536) if hasattr(self.stream, "read1") else os.read(self.stream.fileno(), 65536):
            self.buffer.add(chunk)

    def text(self) -> str:
        return self.buffer.text()
