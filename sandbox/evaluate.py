"""Evaluate candidates in a sandbox: the controller's entry into the harness.

``evaluate_in(box, source, config)`` runs one ``python -m sandbox.harness`` per evaluation (any
backend). ``WarmEvaluator(box)`` keeps one long-lived harness in a sandbox that can hold one (the
local one, a Docker container: ``python -m sandbox.harness.serve``) whose rank groups are started
ahead, for episodes, batches and the service: the same reports, a fraction of the start-up.
``SequentialEvaluator`` picks one of the two for evaluations that come one after another.
"""

from __future__ import annotations

import json
import os
import threading
import time

import structlog
from pydantic import ValidationError

from sandbox.backends import Sandbox, SandboxError
from sandbox.harness.config import HarnessConfig
from sandbox.report import EvalReport, LogExcerpt
from sandbox.readiness import wait_readable

log = structlog.get_logger(__name__)

HARNESS_SLACK_S = 60.0  # beyond the sum of stage timeouts, before the sandbox kills the harness
CLOSE_WAIT_S = 10.0  # for a warm harness to end its groups once asked, before it is killed


def harness_budget_s(config: HarnessConfig) -> float:
    t = config.timeouts
    return 2 * t.startup_s + 2 * t.build_s + 3 * t.correctness_s + 2 * t.performance_s + t.profile_s + HARNESS_SLACK_S


def evaluation_budget_s(config: HarnessConfig, timeout_s: float | None = None) -> float:
    """How long one evaluation may take before its harness is killed: the sum of its stage limits
    with some slack, or ``timeout_s`` where that is shorter (an agent's command with a deadline)."""
    return harness_budget_s(config) if timeout_s is None else min(harness_budget_s(config), max(timeout_s, 1.0))


def evaluate_in(box: Sandbox, source: str, config: HarnessConfig, filename: str = "solution.py", subdir: str = "",
                timeout_s: float | None = None) -> EvalReport:
    """Run the harness on ``source`` inside the started sandbox ``box``, in its own ``subdir``
    of the work dir when given (several evaluations of one episode share a sandbox); ``timeout_s``
    shortens the harness's own budget (an agent's command with a deadline)."""
    config = config.model_copy(update={"solution": filename})
    prefix = f"{subdir}/" if subdir else ""
    box.write_file(prefix + filename, source)
    box.write_file(prefix + "harness.json", config.model_dump_json())
    result = box.exec([box.python, "-P", "-m", "sandbox.harness", "--config", "harness.json"], timeout_s=evaluation_budget_s(config, timeout_s),
                      cwd=subdir or None)
    try:
        report = EvalReport.model_validate(json.loads(result.stdout))
    except (ValueError, ValidationError) as error:
        report = _no_report(config, result, box, prefix, error if result.stdout.strip() else None)
    report.isolation = sorted(set(box.isolation) | set(report.isolation))
    log.info("evaluated", problem=config.problem, status=report.status, wall_s=report.wall_s)
    return report


def _no_report(config: HarnessConfig, result, box: Sandbox, prefix: str, unreadable: Exception | None) -> EvalReport:
    why = "timed out" if result.timed_out else f"exited with code {result.returncode}"
    logs = [LogExcerpt.of("harness stderr", result.stderr)] if result.stderr.strip() else []
    if unreadable is not None:
        logs.append(LogExcerpt.of("harness output", result.stdout))
        why += f" with a report that could not be read ({str(unreadable).splitlines()[0]})"
    else:
        why += " without a report"
    try:
        logs.append(LogExcerpt.of("harness log", box.read_file(prefix + "logs/harness.log").decode(errors="replace")))
    except Exception:  # noqa: BLE001 - the log may not exist
        pass
    return EvalReport(
        status="timeout" if result.timed_out else "crashed", message=f"the harness {why}",
        problem=config.problem, world=config.world, device=config.device, dtype=config.dtype or "",
        size=config.size or "", logs=logs,
    )


class WarmEvaluator:
    """Evaluations through one long-lived harness in the started sandbox ``box``; one at a time
    (callers that share it take turns). If the harness dies it is started again and the
    evaluation in flight is reported as crashed."""

    def __init__(self, box, depth: int | None = None):
        if not can_warm(box):
            raise SandboxError(f"warm evaluation needs a sandbox that can hold a long-lived process; {box.name} cannot")
        self.box = box
        self.depth = depth  # candidate groups started ahead (None: the harness's default for the device)
        self.process = None
        self._ids = 0
        self._lock = threading.Lock()

    def _ensure(self) -> None:
        if self.process is None or self.process.poll() is not None:
            depth = ["--depth", str(self.depth)] if self.depth else []
            self.process = self.box.spawn([self.box.python, "-P", "-m", "sandbox.harness.serve", *depth])

    def evaluate(self, source: str, config: HarnessConfig, timeout_s: float | None = None) -> EvalReport:
        """``source`` judged under ``config``; ``timeout_s`` shortens the harness's budget (an agent's
        command with a deadline), past which the harness is ended and started again for the next."""
        with self._lock:
            self._ensure()
            self._ids += 1
            request = {"id": self._ids, "config": json.loads(config.model_dump_json()), "source": source}
            try:
                self.process.stdin.write((json.dumps(request) + "\n").encode())
                self.process.stdin.flush()
                line = _read_line(self.process.stdout, evaluation_budget_s(config, timeout_s))
            except TimeoutError as error:
                self.close()
                return _failure(config, f"the harness timed out without a report ({error})", status="timeout")
            except (BrokenPipeError, OSError) as error:
                self.close()
                return _failure(config, f"the warm harness failed ({type(error).__name__}: {error})")
            try:
                reply = json.loads(line)
                report = EvalReport.model_validate(reply["report"])
            except (ValueError, KeyError, TypeError, ValidationError) as error:
                self.close()
                return _failure(config, f"the warm harness answered what could not be read ({str(error)[:200]})")
        report.isolation = sorted(set(self.box.isolation) | set(report.isolation))
        return report

    def close(self) -> None:
        """End the harness and every rank group it keeps: asked first (its input closed, it ends
        them and waits until they are gone), killed when it does not end within CLOSE_WAIT_S.
        Killed, it leaves nothing either: a jail ends with its keeper's control pipe, a
        reference zygote with its parent."""
        if self.process is not None:
            import subprocess

            try:
                self.process.stdin.close()
                self.process.wait(CLOSE_WAIT_S)
            except (OSError, subprocess.TimeoutExpired):
                pass
            self.process.kill_tree()
            self.process.wait()
            self.process = None

    def __enter__(self) -> "WarmEvaluator":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class SequentialEvaluator:
    """Evaluations one after another in the started sandbox ``box`` (an agent episode's steps, a
    bash episode's checks): with ``warm``, through one long-lived harness where the sandbox allows
    it (``WarmEvaluator``, one candidate group started ahead: the next evaluation comes after this
    one), else a harness process each (``evaluate_in``)."""

    DEPTH = 1

    def __init__(self, box, warm: bool):
        self.box = box
        self.warm = WarmEvaluator(box, self.DEPTH) if warm and box is not None and can_warm(box) else None

    def evaluate(self, source: str, config: HarnessConfig, filename: str = "solution.py", subdir: str = "",
                 timeout_s: float | None = None) -> EvalReport:
        if self.warm is not None:
            return self.warm.evaluate(source, config.model_copy(update={"solution": filename}), timeout_s)
        return evaluate_in(self.box, source, config, filename=filename, subdir=subdir, timeout_s=timeout_s)

    def close(self) -> None:
        if self.warm is not None:
            self.warm.close()


def _read_line(stream, timeout_s: float) -> bytes:
    deadline = time.monotonic() + timeout_s
    buffer = b""
    while not buffer.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0 or not wait_readable([stream], left):
            raise TimeoutError(f"no report within {timeout_s:.0f} s")
        chunk = os.read(stream.fileno(), 1 << 20)
        if not chunk:
            raise OSError("the harness ended without a report")
        buffer += chunk
    return buffer


def can_warm(box) -> bool:
    """Whether ``box`` can hold a long-lived harness (``WarmEvaluator``): the local sandbox and
    Docker's can."""
    return hasattr(box, "spawn")


def _failure(config: HarnessConfig, message: str, status: str = "crashed") -> EvalReport:
    return EvalReport(status=status, message=message, problem=config.problem, world=config.world, device=config.device,
                      dtype=config.dtype or "", size=config.size or "")
