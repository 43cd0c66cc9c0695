"""The controller's side of the agent's shell: one sandbox per episode, commands run in it one
at a time (``sandbox.shell`` jails each), kloop's commands served while a command runs.

    with Shell(box_settings, harness, commands) as shell:
        shell.write("reference.py", source)           # into the shell's home folder
        result = shell.run("ls -la", timeout_s=60)    # CommandResult

``commands(request, seconds_left) -> {"text", "exit_code"}`` answers each call of ``check``,
``bench``, ``profile`` or ``submit`` (see agent.bash.commands); it runs here, outside the jail.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any

import structlog
from pydantic import BaseModel

from sandbox.backends import Sandbox, SandboxError
from sandbox.report import head_and_tail

log = structlog.get_logger(__name__)

ROOT = "shell"
RUNNER_SLACK_S = 60.0  # beyond the command's own deadline, before the sandbox kills the runner
POLL_S = 0.05

Commands = Callable[[dict[str, Any], float], dict[str, Any]]


class CommandResult(BaseModel):
    """What one command did. ``head``/``tail`` are its output (stdout and stderr merged) around
    ``elided_chars`` characters left out; ``exception`` is set when it could not run at all."""

    command: str
    returncode: int
    head: str = ""
    tail: str = ""
    elided_chars: int = 0
    timed_out: bool = False
    duration_s: float = 0.0
    exception: str = ""
    calls: list[dict[str, Any]] = []
    measures: list[str] = []
    gaps: list[str] = []

    @property
    def output(self) -> str:
        """The output as shown: head, a marker for what was left out, tail."""
        return head_and_tail(self.head, self.tail, self.elided_chars)


class Shell:
    """The agent's shell in the sandbox ``box`` (started and closed with this object)."""

    def __init__(self, box: Sandbox, commands: Commands, device: str = "cpu", output_limit_chars: int = 10_000):
        self.box, self.commands, self.device, self.output_limit = box, commands, device, output_limit_chars
        self.count = 0

    @property
    def root(self) -> str:
        return f"{self.box.workdir.rstrip('/')}/{ROOT}"

    def __enter__(self) -> Shell:
        self.box.start()
        return self

    def __exit__(self, *exc) -> None:
        self.box.close()

    def write(self, relative: str, content: str | bytes) -> None:
        """A file in the shell's home folder (the task's public files)."""
        self.box.write_file(f"{ROOT}/home/{relative}", content)

    def run(self, command: str, timeout_s: float) -> CommandResult:
        """Run ``command`` with bash in the jail; everything it starts ends with it or at ``timeout_s``."""
        self.count += 1
        name = f"c{self.count:04d}"
        config = {"command": command, "id": name, "root": self.root, "timeout_s": timeout_s, "output_limit": self.output_limit,
                  "device": self.device}
        self.box.write_file(f"{ROOT}/commands/{name}.json", json.dumps(config))
        outcome: dict[str, Any] = {}
        started = time.monotonic()

        def execute() -> None:
            try:
                outcome["result"] = self.box.exec([self.box.python, "-m", "sandbox.shell", "--config", f"{ROOT}/commands/{name}.json"],
                                                  timeout_s=timeout_s + RUNNER_SLACK_S)
            except BaseException as error:  # noqa: BLE001 - handed to the caller below
                outcome["error"] = error

        thread = threading.Thread(target=execute, name=f"shell-{name}", daemon=True)
        thread.start()
        served = 0
        while thread.is_alive():
            served += self._serve(name, served + 1, started + timeout_s)
            thread.join(POLL_S)
        if "error" in outcome:
            raise outcome["error"]
        return self._result(command, outcome["result"])

    def _serve(self, name: str, index: int, deadline: float) -> int:
        """Answer the command's ``index``-th call of a kloop command if it is waiting; 1 if it was."""
        path = f"{ROOT}/spool/{name}-{index}"
        try:
            request = json.loads(self.box.read_file(f"{path}.request.json"))
        except (SandboxError, ValueError):
            return 0
        try:
            reply = self.commands(request, max(deadline - time.monotonic(), 0.0))
        except Exception as error:  # noqa: BLE001 - a bug here must not hang the command
            log.exception("kloop command failed", request=request.get("tool"))
            reply = {"text": f"kloop: {request.get('tool')} failed inside kloop ({type(error).__name__}: {error}); this is a bug "
                             f"in kernel-loop, not in your code", "exit_code": 3}
        self.box.write_file(f"{path}.reply.json", json.dumps(reply))
        return 1

    def _result(self, command: str, result) -> CommandResult:
        try:
            data = json.loads(result.stdout.strip().splitlines()[-1])
            return CommandResult(command=command, **data)
        except (ValueError, IndexError, TypeError) as error:
            why = "was stopped" if result.timed_out else f"exited with code {result.returncode}"
            detail = (result.stderr or result.stdout)[-2000:]
            raise SandboxError(f"the shell's runner {why} without a result ({type(error).__name__}); its output ends: {detail}") from None
