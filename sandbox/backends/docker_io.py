"""The bytes of one ``docker exec``: stdin sent (then half-closed), stdout and stderr read
from the multiplexed stream with size caps, all on the raw hijacked socket so the caller
keeps control of timeouts and memory (``ExecStream``); or a long-lived one with pipe-like ends
(``SpawnedExec``)."""

from __future__ import annotations

import os
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator

from sandbox.backends.base import CappedBuffer

HEADER_BYTES = 8
STDERR = 2
SPAWNED_STDERR_BYTES = 1 << 16  # a spawned command's stderr kept (its head and tail), for a message when it dies
POLL_S = 0.05


def raw_socket(hijacked) -> socket.socket:
    """The OS socket under what ``exec_start(socket=True)``/``attach_socket`` return."""
    sock = getattr(hijacked, "_sock", hijacked)
    if not isinstance(sock, socket.socket):
        raise TypeError(f"unsupported docker transport {type(hijacked).__name__}: use a unix or tcp DOCKER_HOST")
    sock.settimeout(None)  # the SDK's API timeout must not cut a long-running command short
    return sock


class ExecStream:
    """Drives one exec's socket: a writer thread for stdin, a reader thread for the output."""

    def __init__(self, hijacked, limit: int, stdin: bytes | None):
        self.hijacked = hijacked  # holds the HTTP response: collecting it could close the socket
        self.sock = raw_socket(hijacked)
        self.stdout, self.stderr = CappedBuffer(limit), CappedBuffer(limit)
        self._reader = threading.Thread(target=self._read, daemon=True, name="docker-exec-out")
        self._writer = None if stdin is None else threading.Thread(target=self._write, args=(stdin,), daemon=True, name="docker-exec-in")

    def start(self) -> "ExecStream":
        self._reader.start()
        if self._writer:
            self._writer.start()
        return self

    def wait(self, timeout_s: float) -> bool:
        """True when the stream ended (the command finished) within ``timeout_s``."""
        self._reader.join(timeout_s)
        return not self._reader.is_alive()

    def abort(self) -> None:
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._reader.join(5)

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass

    def _write(self, data: bytes) -> None:
        try:
            view = memoryview(data)
            while view:
                sent = self.sock.send(view[: 1 << 20])
                view = view[sent:]
            self.sock.shutdown(socket.SHUT_WR)  # EOF on the command's stdin
        except OSError:
            pass  # the command exited without reading all of it

    def _read(self) -> None:
        for kind, payload in frames(self.sock):
            (self.stderr if kind == STDERR else self.stdout).add(payload)


def frames(sock: socket.socket) -> Iterator[tuple[int, bytes]]:
    """(stream, payload) of each frame of an exec's multiplexed output, until the socket ends,
    is shut down or breaks."""
    buffer = bytearray()
    try:
        while chunk := sock.recv(1 << 16):
            buffer += chunk
            start = 0
            while len(buffer) - start >= HEADER_BYTES:
                size = int.from_bytes(buffer[start + 4:start + 8], "big")
                if len(buffer) - start < HEADER_BYTES + size:
                    break
                yield buffer[start], bytes(buffer[start + HEADER_BYTES:start + HEADER_BYTES + size])
                start += HEADER_BYTES + size
            del buffer[:start]
    except OSError:
        pass  # shut down (abort) or broken: what came so far was given


class SocketWriter:
    """A spawned exec's stdin: what is written goes to the command; ``close`` is its EOF."""

    def __init__(self, sock: socket.socket):
        self.sock = sock

    def write(self, data: bytes) -> int:
        self.sock.sendall(data)
        return len(data)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        try:
            self.sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass


class SpawnedExec:
    """A long-lived ``docker exec`` with the ends a local child process has: ``stdin`` (writes go
    to the command, ``close()`` is EOF), ``stdout`` (a pipe fed from the multiplexed stream, to
    read and to wait on), its stderr kept capped (``stderr_text``); ``poll``/``wait`` ask the
    engine whether it still runs; ``kill_tree()`` ends it and whatever it started (``kill``:
    the sandbox's sweep of every process but its keeper)."""

    def __init__(self, hijacked, inspect: Callable[[], dict], kill: Callable[[], None], args: list[str]):
        self.hijacked = hijacked  # holds the HTTP response: collecting it could close the socket
        self.sock = raw_socket(hijacked)
        self.args, self._inspect, self._kill = args, inspect, kill
        read_end, self._stdout_write = os.pipe()
        self.stdout = os.fdopen(read_end, "rb", buffering=0)
        self.stdin = SocketWriter(self.sock)
        self.stderr = CappedBuffer(SPAWNED_STDERR_BYTES)
        self.returncode: int | None = None
        self._pump = threading.Thread(target=self._forward, daemon=True, name="docker-spawned-out")
        self._pump.start()

    def _forward(self) -> None:
        try:
            for kind, payload in frames(self.sock):
                if kind == STDERR:
                    self.stderr.add(payload)
                    continue
                view = memoryview(payload)
                while view:
                    view = view[os.write(self._stdout_write, view):]
        except OSError:
            pass  # the reading end was closed: nobody is listening any more
        finally:
            os.close(self._stdout_write)  # EOF for the reader

    def stderr_text(self) -> str:
        return self.stderr.text()

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                info = self._inspect()
            except Exception:  # noqa: BLE001 - the engine or the container is gone: so is the command
                info = {"Running": False, "ExitCode": 137}
            if not info.get("Running"):
                code = info.get("ExitCode")
                self.returncode = 137 if code is None else int(code)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(self.args, timeout)
            time.sleep(POLL_S)
        return self.returncode

    def kill_tree(self) -> None:
        self._kill()
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._pump.join(5)
        self.sock.close()
        self.stdout.close()
