"""The caller's side of a jail: start it, read what held, wait for it, end it whole."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from sandbox.jail.spec import JailError, JailSpec, gaps
from sandbox.readiness import wait_readable

PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])  # the folder holding `sandbox`
KILL_WAIT_S = 10.0


class Jail:
    """One confined process tree. ``measures``: what held; ``gaps``: what did not, in words.
    ``returncode``: argv's exit code (negative: the signal that killed it) once it is over."""

    def __init__(self, process: subprocess.Popen, control_fd: int, status_fd: int, spec: JailSpec):
        self.process, self.spec = process, spec
        self._control_fd, self._status_fd = control_fd, status_fd
        self._buffer = b""
        self._finish_lock = threading.Lock()
        self._finished = False
        self.measures: tuple[str, ...] = ()
        self.returncode: int | None = None

    @property
    def gaps(self) -> tuple[str, ...]:
        return tuple(gaps(self.spec.network, list(self.measures)))

    @classmethod
    def start(cls, spec: JailSpec, argv: list[str], pass_fds: tuple[int, ...] = (), stdin=subprocess.DEVNULL, stdout=None,
              stderr=None, start_timeout_s: float = 60.0) -> Jail:
        """Run ``argv`` as the root of a confined tree; returns once it is about to execute (the
        measures known). ``pass_fds`` keep their numbers in argv's process; stdin, stdout and
        stderr are as for subprocess.Popen (stdin defaults to /dev/null). Raises JailError if the
        jail cannot be set up or argv cannot be executed."""
        if not argv:
            raise JailError("nothing to run in the jail: argv is empty")
        config = json.dumps(spec.config(list(argv), tuple(pass_fds))).encode()
        config_fd = os.memfd_create("kloop-jail-config")
        control_r, control_w = os.pipe()
        status_r, status_w = os.pipe()
        try:
            view = memoryview(config)
            while view:
                view = view[os.write(config_fd, view):]
            os.lseek(config_fd, 0, os.SEEK_SET)
            process = subprocess.Popen(
                [sys.executable, "-S", "-B", "-P", "-m", "sandbox.jail", str(config_fd), str(control_r), str(status_w)],
                pass_fds=(config_fd, control_r, status_w, *pass_fds), env={"PYTHONPATH": PACKAGE_ROOT}, cwd="/",
                stdin=stdin, stdout=stdout, stderr=stderr, start_new_session=True,
            )
        except BaseException as error:
            os.close(control_w)
            os.close(status_r)
            if isinstance(error, OSError):
                raise JailError(f"cannot start the jail's init with {sys.executable}: {error}") from None
            raise
        finally:
            for fd in (config_fd, control_r, status_w):
                os.close(fd)
        jail = cls(process, control_w, status_r, spec)
        event = jail._next_event(time.monotonic() + start_timeout_s)
        if event is None or event.get("event") != "started":
            jail.kill()
            if event is None:
                raise JailError(f"the jail did not start within {start_timeout_s:g} s (keeper exit code {process.returncode})")
            raise JailError(event.get("error") or f"unexpected jail event {event}")
        jail.measures = tuple(event["measures"])
        return jail

    def _next_event(self, deadline: float | None) -> dict | None:
        """The next status line from the jail's init; None at end of stream or at the deadline."""
        while b"\n" not in self._buffer:
            wait = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not wait_readable([self._status_fd], wait):
                return None
            chunk = os.read(self._status_fd, 65536)
            if not chunk:
                return None
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return json.loads(line)

    def _finish(self) -> int:
        """Read the last events and close the pipes, once: poll() and kill() may race from two
        threads (a warm pool's waiter and its closer), and a second reader of a closed status fd
        got EBADF, or another file that took its number."""
        with self._finish_lock:
            if self._finished:
                return self.returncode
            self._finished = True
            return self._finish_once()

    def _finish_once(self) -> int:
        returncode = self.process.returncode
        while (event := self._next_event(time.monotonic() + 1.0)) is not None:
            if event.get("event") == "exit":
                returncode = event["returncode"]
        os.close(self._status_fd)
        if self._control_fd >= 0:
            os.close(self._control_fd)
            self._control_fd = -1
        self.returncode = returncode
        return returncode

    def poll(self) -> int | None:
        if self.returncode is None and self.process.poll() is not None:
            self._finish()
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """Wait for argv's process to exit (the rest of the tree is ended with it); raises
        subprocess.TimeoutExpired after ``timeout`` seconds, the jail still running."""
        if self.returncode is None:
            self.process.wait(timeout)
            self._finish()
        return self.returncode

    def kill(self) -> int:
        """End the whole tree, however it forked, and wait until it is gone."""
        if self.returncode is not None:
            return self.returncode
        with self._finish_lock:
            if self._control_fd >= 0:
                os.close(self._control_fd)  # the keeper kills the supervisor; with it goes the tree
                self._control_fd = -1
        try:
            self.process.wait(KILL_WAIT_S)
        except subprocess.TimeoutExpired:
            self.process.kill()  # the supervisor dies with it (parent-death signal)
            self.process.wait()
        return self._finish()

    def __enter__(self) -> Jail:
        return self

    def __exit__(self, *_) -> None:
        self.kill()
