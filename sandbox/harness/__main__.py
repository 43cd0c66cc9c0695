"""Entry point inside the sandbox: ``python -m sandbox.harness --config harness.json``.

The report (EvalReport JSON) goes to this process's original stdout, a channel no rank can
reach: ranks write to pipes the harness reads, this process is non-dumpable (its /proc files
are closed to same-user processes) and, as a child subreaper, it kills whatever the evaluation
left behind before it exits (candidate ranks end with their jail in any case), or at once when
its owner is gone (sandbox.harness.lifeline).
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from pathlib import Path

from sandbox.harness.lifeline import end_with_owner, reap_descendants


def _redirect_output(log_path: Path) -> int:
    report_fd = os.dup(1)  # non-inheritable: no child gets it
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(log_fd, 1)
    os.dup2(log_fd, 2)
    os.close(log_fd)
    sys.stdout = os.fdopen(1, "w", buffering=1, closefd=False)
    sys.stderr = os.fdopen(2, "w", buffering=1, closefd=False)
    return report_fd


def prepare_process(workdir: Path) -> int:
    """Make this process the trusted harness: its output to a log file (the returned descriptor
    is the original stdout, for reports only), a subreaper, non-dumpable, multicast off, and
    ended with everything below it when its owner is gone (sandbox.harness.lifeline)."""
    report_fd = _redirect_output(workdir / "logs" / "harness.log")
    if sys.platform == "linux":
        from sandbox.jail import kernel

        kernel.prctl(kernel.PR_SET_DUMPABLE, 0)  # /proc/<pid>/{environ,fd,mem} closed to same-user processes
    end_with_owner(report_fd)
    import structlog

    from kloop_runtime.settings import MULTICAST_OFF

    structlog.configure(processors=[structlog.processors.TimeStamper(fmt="iso"), structlog.processors.add_log_level,
                                    structlog.processors.JSONRenderer()],
                        logger_factory=structlog.PrintLoggerFactory(sys.stderr))
    os.environ.update(MULTICAST_OFF)
    return report_fd


def write_report(report_fd: int, payload: dict | str) -> None:
    """One line of JSON to the report channel."""
    import json

    data = (payload if isinstance(payload, str) else json.dumps(payload)).encode() + b"\n"
    while data:
        data = data[os.write(report_fd, data):]


def crash_report(config, error: BaseException):
    """The report of a harness that failed: a bug in kernel-loop, said as such."""
    from sandbox.report import EvalReport, LogExcerpt

    return EvalReport(status="crashed", message=f"harness error: {type(error).__name__}: {error}", problem=config.problem,
                      world=config.world, device=config.device, dtype=config.dtype or "", size=config.size or "",
                      logs=[LogExcerpt.of("harness traceback", traceback.format_exc())],
                      notes=["this is a bug in kernel-loop, not in the solution"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sandbox.harness")
    parser.add_argument("--config", required=True, type=Path)
    args = parser.parse_args(argv)
    workdir = Path.cwd()
    report_fd = prepare_process(workdir)
    from sandbox.harness.config import HarnessConfig
    from sandbox.harness.pipeline import Evaluation

    config = HarnessConfig.model_validate_json(args.config.read_text())
    try:
        report = Evaluation(config, workdir).run()
    except Exception as error:  # noqa: BLE001 - a harness bug still produces a report
        report = crash_report(config, error)
    write_report(report_fd, report.model_dump_json())
    os.close(report_fd)
    reap_descendants()
    return 0


if __name__ == "__main__":
    sys.exit(main())
