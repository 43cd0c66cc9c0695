"""The bytes of one ``docker exec``: stdin sent (then half-closed), stdout and stderr read
from the multiplexed stream with size caps, all on the raw hijacked socket so the caller
keeps control of timeouts and memory."""

from __future__ import annotations

import socket
import threading

from sandbox.backends.base import CappedBuffer

HEADER_BYTES = 8
STDERR = 2


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
        buffer = bytearray()
        try:
            while chunk := self.sock.recv(1 << 16):
                buffer += chunk
                start = 0
                while len(buffer) - start >= HEADER_BYTES:
                    size = int.from_bytes(buffer[start + 4:start + 8], "big")
                    if len(buffer) - start < HEADER_BYTES + size:
                        break
                    payload = bytes(buffer[start + HEADER_BYTES:start + HEADER_BYTES + size])
                    (self.stderr if buffer[start] == STDERR else self.stdout).add(payload)
                    start += HEADER_BYTES + size
                del buffer[:start]
        except OSError:
            pass  # the socket was shut down (abort) or broke: the output so far is kept
