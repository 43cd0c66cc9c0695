"""A long-lived harness: ``python -m sandbox.harness.serve``, one evaluation after another.

Requests come as JSON lines on stdin (``{"id": ..., "config": HarnessConfig, "source": str}``),
reports go as JSON lines (``{"id": ..., "report": EvalReport}``) to the original stdout, which no
rank can reach (as in ``python -m sandbox.harness``). Between evaluations it keeps rank groups
warm (sandbox.harness.warm): a candidate group started ahead and used once, the reference's kept
for the next evaluation of the same problem. Used by batches and the service through
``sandbox.evaluate.WarmEvaluator``.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import sys
from pathlib import Path

from sandbox.harness.__main__ import crash_report, prepare_process, write_report


def serve(report_fd: int, workdir: Path) -> None:
    from pydantic import ValidationError

    from sandbox.harness.config import HarnessConfig
    from sandbox.harness.pipeline import Evaluation
    from sandbox.harness.warm import WarmGroups
    groups = WarmGroups(workdir / "groups")
    counter = itertools.count(1)
    try:
        for line in sys.stdin:
            if not line.strip():
                continue
            request_id = None
            try:
                request = json.loads(line)
                request_id = request.get("id")
                config = HarnessConfig.model_validate(request["config"])
                folder = workdir / f"eval-{next(counter)}"
                folder.mkdir(parents=True)
                (folder / config.solution).write_text(request["source"])
            except (ValueError, KeyError, TypeError, ValidationError) as error:
                write_report(report_fd, {"id": request_id, "error": f"a malformed request: {error}"[:2000]})
                continue
            try:
                report = Evaluation(config, folder, groups=groups).run()
            except Exception as error:  # noqa: BLE001 - a harness bug still produces a report
                report = crash_report(config, error)
            write_report(report_fd, {"id": request_id, "report": json.loads(report.model_dump_json())})
            shutil.rmtree(folder, ignore_errors=True)
    finally:
        groups.close()


def main() -> int:
    workdir = Path.cwd()
    report_fd = prepare_process(workdir)
    serve(report_fd, workdir)
    os.close(report_fd)
    return 0


if __name__ == "__main__":
    sys.exit(main())
