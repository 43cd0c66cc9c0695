"""A long-lived harness: ``python -m sandbox.harness.serve``, one evaluation after another.

Requests come as JSON lines on stdin (``{"id": ..., "config": HarnessConfig, "source": str}``),
reports go as JSON lines (``{"id": ..., "report": EvalReport}``) to the original stdout, which no
rank can reach (as in ``python -m sandbox.harness``). Between evaluations it keeps rank groups
warm (sandbox.harness.warm): a candidate group started ahead and used once, the reference's kept
for the next evaluation of the same problem. Used by agent episodes, batches and the service
through ``sandbox.evaluate.WarmEvaluator``; ``--depth N``: N candidate groups started ahead (an
episode's one evaluation at a time needs one).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import tempfile
from pathlib import Path

from kloop_runtime.tree_removal import remove_tree
from sandbox.harness.__main__ import crash_report, prepare_process, write_report


def serve(report_fd: int, workdir: Path, depth: int | None = None) -> None:
    from pydantic import ValidationError

    from sandbox.harness.config import HarnessConfig
    from sandbox.harness.pipeline import Evaluation
    from sandbox.harness.warm import WarmGroups
    groups = WarmGroups(workdir / "groups", depth=depth)
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
                # a folder of its own even where a harness killed before this one left its evaluation's
                folder = Path(tempfile.mkdtemp(prefix=f"eval-{next(counter)}-", dir=workdir))
                (folder / config.solution).write_text(request["source"])
            except (ValueError, KeyError, TypeError, ValidationError) as error:
                write_report(report_fd, {"id": request_id, "error": f"a malformed request: {error}"[:2000]})
                continue
            except OSError as error:  # the work dir (full, say): this request fails, the harness goes on
                write_report(report_fd, {"id": request_id, "error": f"could not set up the evaluation: {error}"[:2000]})
                continue
            try:
                report = Evaluation(config, folder, groups=groups).run()
            except Exception as error:  # noqa: BLE001 - a harness bug still produces a report
                report = crash_report(config, error)
            write_report(report_fd, {"id": request_id, "report": json.loads(report.model_dump_json())})
            remove_tree(folder)
    finally:
        groups.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sandbox.harness.serve")
    parser.add_argument("--depth", type=int, default=None,
                        help="candidate groups started ahead per kind (default: sandbox.harness.warm.pool_depth of the device)")
    args = parser.parse_args(argv)
    workdir = Path.cwd()
    report_fd = prepare_process(workdir)
    serve(report_fd, workdir, depth=args.depth if args.depth and args.depth > 0 else None)
    os.close(report_fd)
    return 0


if __name__ == "__main__":
    sys.exit(main())
