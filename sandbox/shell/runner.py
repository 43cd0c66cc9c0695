"""One command of the agent's shell: run it in the jail, serve kloop's commands, cut its output.

The controller writes a JSON config (``RunnerConfig``) outside the shell's reach and runs
``python -m sandbox.shell --config FILE`` in the sandbox; this prints one JSON line (``result``).
The command's deadline covers everything it starts, kloop's commands included: at the deadline
the jail (the whole process tree) is killed, and at once if the controller is gone
(sandbox.harness.lifeline).
"""

from __future__ import annotations

import argparse
import json
import os
import select
import shutil
import socket
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from sandbox.backends.base import CappedBuffer
from sandbox.harness.lifeline import end_with_owner
from sandbox.readiness import wait_readable

TOOLS = ("check", "bench", "profile", "submit")
MAX_REQUEST_BYTES = 600 * 1024  # the tool sends at most 512 KiB of source, JSON-escaped
MAX_QUEUED = 4
REQUEST_READ_S = 5.0
POLL_S = 0.05
SHELL_NPROC = 2048
SHELL_ENV = {"TERM": "dumb", "PAGER": "cat", "GIT_PAGER": "cat", "MANPAGER": "cat", "PIP_NO_INPUT": "1",
             "PIP_DISABLE_PIP_VERSION_CHECK": "1"}


@dataclass(frozen=True)
class RunnerConfig:
    command: str
    id: str
    root: str
    timeout_s: float
    output_limit: int = 10_000
    device: str = "cpu"

    @property
    def home(self) -> Path:
        return Path(self.root) / "home"

    @property
    def spool(self) -> Path:
        return Path(self.root) / "spool"


def stage(root: Path) -> None:
    """The shell's packages (kloop_runtime, as the judge's ranks get it) and the tool client with
    its commands, once per episode."""
    from sandbox.harness.launch import stage_rank_packages

    tools = root / "tools"
    if (tools / "bin" / "submit").exists():
        return
    for name in ("home", "spool", "packages", "tools/bin"):
        (root / name).mkdir(parents=True, exist_ok=True)
    os.chmod(root / "spool", 0o700)
    stage_rank_packages(root / "packages")
    shutil.copyfile(Path(__file__).with_name("tool.py"), tools / "tool.py")
    for name in TOOLS:
        script = tools / "bin" / name
        script.write_text(f'#!/bin/sh\nexec "{sys.executable}" -S -B -P "{tools / "tool.py"}" {name} "$@"\n')
        script.chmod(0o755)
    for path in [root / "packages", tools]:
        for top, dirs, files in os.walk(path):
            for entry in dirs + files:
                os.chmod(os.path.join(top, entry), 0o755 if entry in dirs or entry in TOOLS else 0o644)


def shell_env(config: RunnerConfig, tool_fd: int, bytecode: Path | None) -> dict[str, str]:
    """What the command's environment holds: the candidate ranks' allow-list (no keys, no cache
    paths), kloop's commands and this Python first on PATH, the rank packages on PYTHONPATH;
    ``bytecode``: torch's, read only (sandbox.harness.bytecode)."""
    from sandbox.harness.launch import candidate_env

    root = Path(config.root)
    env = candidate_env(config.home, root / "packages", config.device, bytecode)
    path = [str(root / "tools" / "bin"), os.path.dirname(sys.executable)]
    cuda = env.get("CUDA_HOME") or env.get("CUDA_PATH") or "/usr/local/cuda"
    if os.path.isdir(os.path.join(cuda, "bin")):
        path.append(os.path.join(cuda, "bin"))
    path += [p for p in env.get("PATH", "/usr/local/bin:/usr/bin:/bin").split(os.pathsep) if p and p not in path]
    env.update(SHELL_ENV, PATH=os.pathsep.join(path), KLOOP_TOOL_FD=str(tool_fd))
    for name in ("PYTHONSAFEPATH", "PYTHONDONTWRITEBYTECODE"):  # `python -c "import solution"` works from home
        env.pop(name, None)
    return env


class Output:
    """The command's output (stdout and stderr merged), its head and tail kept."""

    def __init__(self, limit: int):
        self.limit = limit
        self.buffer = CappedBuffer(4 * limit)

    def add(self, chunk: bytes) -> None:
        self.buffer.add(chunk)

    def result(self) -> dict:
        """``head`` and ``tail`` (characters) and how many characters between them were left out."""
        half = self.limit // 2
        head = bytes(self.buffer.head).decode(errors="replace")
        tail = bytes(self.buffer.tail).decode(errors="replace")
        if not self.buffer.dropped:
            head, tail = head + tail, ""
            if len(head) <= self.limit:
                return {"head": head, "tail": "", "elided_chars": 0}
            head, tail = head[:-half], head[-half:]
        kept_head, kept_tail = head[:half], tail[-half:] if tail else ""
        elided = len(head) - len(kept_head) + self.buffer.dropped + len(tail) - len(kept_tail)
        return {"head": kept_head, "tail": kept_tail, "elided_chars": elided}


class ToolServer:
    """Takes kloop's command calls from the jail, passes each to the controller through the
    spool, and answers with its reply. One call at a time; a few more may wait."""

    def __init__(self, config: RunnerConfig, listener: socket.socket):
        self.config, self.listener = config, listener
        self.queue: list[socket.socket] = []
        self.active: tuple[socket.socket, str] | None = None
        self.count = 0
        self.calls: list[dict] = []

    def accept(self) -> None:
        """One handed-over channel (anything else in the message is dropped)."""
        try:
            _, fds, _, _ = socket.recv_fds(self.listener, 64, 1)
        except OSError:
            return
        for fd in fds:
            try:
                channel = socket.socket(fileno=fd)
            except OSError:
                os.close(fd)
                continue
            if channel.family != socket.AF_UNIX or len(self.queue) >= MAX_QUEUED:
                channel.close()
            else:
                self.queue.append(channel)

    def advance(self) -> None:
        """Start the next queued call when none is in flight; deliver the reply when it is there."""
        if self.active is None and self.queue:
            self._start(self.queue.pop(0))
        if self.active is not None:
            channel, name = self.active
            reply = _read_reply(self.config.spool / f"{name}.reply.json")
            if reply is not None:
                self._answer(channel, reply)
                self.active = None

    def _start(self, channel: socket.socket) -> None:
        try:
            request = _read_request(channel)
        except ValueError as error:
            self._answer(channel, {"text": f"kloop: bad request ({error})", "exit_code": 2})
            return
        self.count += 1
        name = f"{self.config.id}-{self.count}"
        _write_atomic(self.config.spool / f"{name}.request.json", json.dumps(request))
        self.calls.append({"tool": request["tool"], "file": request["file"], "options": request["options"]})
        self.active = (channel, name)

    @staticmethod
    def _answer(channel: socket.socket, reply: dict) -> None:
        try:
            channel.settimeout(REQUEST_READ_S)
            channel.sendall(json.dumps({"text": str(reply.get("text", "")), "exit_code": int(reply.get("exit_code", 1))}).encode())
        except (OSError, ValueError, TypeError):
            pass
        finally:
            channel.close()

    def close(self) -> None:
        for channel in self.queue + ([self.active[0]] if self.active else []):
            channel.close()


def _read_request(channel: socket.socket) -> dict:
    """A request from the jail, checked: a known tool, a file name, UTF-8 source, simple options."""
    channel.settimeout(REQUEST_READ_S)
    chunks, size = [], 0
    try:
        while chunk := channel.recv(65536):
            size += len(chunk)
            if size > MAX_REQUEST_BYTES:
                raise ValueError("the request is too large")
            chunks.append(chunk)
    except TimeoutError:
        raise ValueError("the request was not finished in time") from None
    except OSError as error:
        raise ValueError(str(error)) from None
    data = json.loads(b"".join(chunks))
    if not isinstance(data, dict) or data.get("tool") not in TOOLS:
        raise ValueError(f"unknown command; kloop's commands are {', '.join(TOOLS)}")
    file, source, options = data.get("file"), data.get("source"), data.get("options") or {}
    if not isinstance(file, str) or not isinstance(source, str) or not isinstance(options, dict) or len(file) > 4096:
        raise ValueError("malformed request")
    clean = {}
    for key, value in options.items():
        if key == "world" and isinstance(value, int) and not isinstance(value, bool):
            clean[key] = value
        elif key in ("device", "size") and isinstance(value, str) and len(value) < 64:
            clean[key] = value
        else:
            raise ValueError(f"unknown option {key!r}")
    return {"tool": data["tool"], "file": file, "source": source, "options": clean}


def _read_reply(path: Path) -> dict | None:
    try:
        reply = json.loads(path.read_text())
    except (OSError, ValueError):
        return None  # not there yet, or not finished being written
    return reply if isinstance(reply, dict) else None


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def run(config: RunnerConfig) -> dict:
    from sandbox.harness.bytecode import rank_bytecode
    from sandbox.harness.hidden import hidden_paths
    from sandbox.jail import Jail, JailError, JailSpec, own_uid

    root = Path(config.root)
    stage(root)
    output = Output(config.output_limit)
    listener, handed = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    out_r, out_w = os.pipe()
    bytecode = rank_bytecode()
    readable = (str(root / "packages"), str(root / "tools"), *([str(bytecode)] if bytecode else []))
    spec = JailSpec(workdir=str(config.home), readable=readable, hidden=hidden_paths(),
                    network="none", env=shell_env(config, handed.fileno(), bytecode), rlimits={"nproc": SHELL_NPROC},
                    devices="none" if config.device == "cpu" else "cuda", uid=own_uid(str(root.resolve())))
    try:
        jail = Jail.start(spec, ["/bin/bash", "-c", config.command], pass_fds=(handed.fileno(),), stdout=out_w, stderr=out_w)
    except JailError as error:
        return {"returncode": -1, "head": "", "tail": "", "elided_chars": 0, "timed_out": False, "duration_s": 0.0,
                "exception": f"the shell could not start: {error}", "measures": [], "gaps": [], "calls": []}
    finally:
        os.close(out_w)
        handed.close()
    started = time.monotonic()  # the command's time starts once the jail is up
    server = ToolServer(config, listener)
    timed_out = False
    deadline = started + config.timeout_s
    poller = select.poll()
    poller.register(out_r, select.POLLIN)
    poller.register(listener, select.POLLIN)
    open_output = True
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                timed_out = True
                break
            for fd, _ in poller.poll(1000 * min(left, POLL_S)):
                if fd == out_r:
                    chunk = os.read(out_r, 65536)
                    if chunk:
                        output.add(chunk)
                    else:
                        poller.unregister(out_r)
                        open_output = False
                elif fd == listener.fileno():
                    server.accept()
            server.advance()
            if not open_output and jail.poll() is not None:
                break
    finally:
        returncode = jail.kill()
        server.close()
        listener.close()
        while open_output and wait_readable([out_r], 0.2) and (chunk := os.read(out_r, 65536)):
            output.add(chunk)
        os.close(out_r)
    return {"returncode": returncode, **output.result(), "timed_out": timed_out,
            "duration_s": round(time.monotonic() - started, 3), "exception": "", "measures": list(jail.measures),
            "gaps": list(jail.gaps), "calls": server.calls}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sandbox.shell")
    parser.add_argument("--config", required=True, type=Path)
    args = parser.parse_args(argv)
    config = RunnerConfig(**json.loads(args.config.read_text()))
    end_with_owner(sys.stdout.fileno())
    result = run(config)
    sys.stdout.write(json.dumps(result) + "\n")
    sys.stdout.flush()
    return 0
