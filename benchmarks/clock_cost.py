"""The harness's own cost of a timed call, as the parent's clock sees it, from throughput.py runs:
per run (a tree, say), the medians over its warm evaluations of the time a call took beyond what the
ranks claimed (unclaimed) and of its staging, for the candidate's group and the reference's. This
cost bounds how finely the clock resolves work hidden after a timer (README, "How a solution is
judged"), so a change to a call's harness work is read here, side by side.

    python benchmarks/clock_cost.py before=/tmp/throughput_baseline/throughput.json after=/tmp/throughput_new/throughput.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from table import print_table

FIELDS = ("candidate_unclaimed_ms", "reference_unclaimed_ms", "candidate_staging_ms", "reference_staging_ms")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", help="LABEL=PATH of a throughput.json")
    args = parser.parse_args(argv)
    rows = []
    for run in args.runs:
        label, _, path = run.rpartition("=")
        try:
            record = json.loads(Path(path).read_text())
        except (OSError, ValueError) as error:
            print(f"{run}: {error}")
            return 2
        checks = [t["timing_check"] for t in record["timings"][1:] if t.get("timing_check")]  # the first evaluation started everything
        if not checks:
            rows.append([label or path, 0, *["-"] * (len(FIELDS) + 1)])
            continue
        walls = record["walls_s"][1:]
        rows.append([label or path, len(checks), *[statistics.median(c[f] for c in checks) for f in FIELDS], statistics.median(walls)])
    print_table("the harness's cost of a timed call (medians over the warm evaluations)",
                ["run", "evaluations", *FIELDS, "evaluation s"], rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
