"""Evaluate one candidate in a sandbox: the controller's single entry into the harness."""

from __future__ import annotations

import json

import structlog
from pydantic import ValidationError

from sandbox.backends import Sandbox
from sandbox.harness.config import HarnessConfig
from sandbox.report import EvalReport, LogExcerpt

log = structlog.get_logger(__name__)

HARNESS_SLACK_S = 60.0  # beyond the sum of stage timeouts, before the sandbox kills the harness


def harness_budget_s(config: HarnessConfig) -> float:
    t = config.timeouts
    return 2 * t.startup_s + 2 * t.build_s + 3 * t.correctness_s + 2 * t.performance_s + t.profile_s + HARNESS_SLACK_S


def evaluate_in(box: Sandbox, source: str, config: HarnessConfig, filename: str = "solution.py", subdir: str = "") -> EvalReport:
    """Run the harness on ``source`` inside the started sandbox ``box``, in its own ``subdir``
    of the work dir when given (several evaluations of one episode share a sandbox)."""
    config = config.model_copy(update={"solution": filename})
    prefix = f"{subdir}/" if subdir else ""
    box.write_file(prefix + filename, source)
    box.write_file(prefix + "harness.json", config.model_dump_json())
    result = box.exec([box.python, "-m", "sandbox.harness", "--config", "harness.json"], timeout_s=harness_budget_s(config),
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
