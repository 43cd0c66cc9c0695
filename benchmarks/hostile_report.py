"""The hostile corpus against the judge, as a table: attack | world | verdict | speedup | caught-by.

    python benchmarks/hostile_report.py                       # CPU, worlds 2 4 8, every fixture
    python benchmarks/hostile_report.py --worlds 2 --only timed_claims_zero,spin_while_reference_runs
    python benchmarks/hostile_report.py --device cuda --worlds 1          # the GPU fixtures on an H200
    python benchmarks/hostile_report.py --device emulate --worlds 2 4

A row ends in OK when the verdict is one the fixture may get (tests/support/hostile_corpus.py), else in
BREACH with the reason. Fixtures run through one long-lived harness per device mode (the path of
batches and the service).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support import hostile_corpus as hc  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda", "emulate"))
    parser.add_argument("--worlds", nargs="+", type=int, default=None)
    parser.add_argument("--only", default="", help="comma-separated fixture names")
    parser.add_argument("--json", type=Path, help="also write the rows here")
    args = parser.parse_args()
    worlds = args.worlds or ([1] if args.device == "cuda" else [2, 4] if args.device == "emulate" else [2, 4, 8])
    wanted = {n for n in args.only.split(",") if n}
    fixture_device = "cpu" if args.device == "cpu" else "any"
    fixtures = [f for kind in ("honest", "hostile") for f in hc.corpus(kind, device=fixture_device)
                if not wanted or f.name in wanted]

    from sandbox.backends import LocalSandbox
    from sandbox.evaluate import WarmEvaluator

    rows, breaches = [], 0
    print(f"{'attack':40} {'world':>5} {'verdict':12} {'speedup':>8}  caught-by", flush=True)
    with LocalSandbox() as box, WarmEvaluator(box) as evaluator:
        for fixture in fixtures:
            for world in worlds:
                if args.device == "cpu" and world not in fixture.worlds:
                    continue
                started = time.time()
                report = evaluator.evaluate(fixture.source(), hc.config(fixture, world, device=args.device))
                problems = hc.verdict_problems(fixture, report)
                problems += [f"left {p}" for p in hc.existing_leaves(hc.leaf_patterns(fixture, box.workdir), started)]
                problems += [f"orphan {p}" for p in hc.orphans(box.workdir, wait_s=3.0)]
                breaches += bool(problems) and not fixture.known_hole
                speedup = "-" if report.speedup is None else f"{report.speedup:.2f}"
                label = f"KNOWN HOLE ({fixture.known_hole[:60]})" if fixture.known_hole else "BREACH"
                verdict = f"{label}: " + "; ".join(problems)[:200] if problems else "OK"
                print(f"{fixture.id:40} {world:>5} {report.status:12} {speedup:>8}  {hc.caught_by(report)}  [{verdict}] "
                      f"({time.time() - started:.0f} s)", flush=True)
                rows.append({"fixture": fixture.id, "world": world, "device": args.device, "status": report.status,
                             "speedup": report.speedup, "message": report.message, "stage": report.stage,
                             "problems": problems, "wall_s": round(time.time() - started, 1),
                             "timing_check": report.timing_check.model_dump() if report.timing_check else None,
                             "candidate_ms": report.candidate_timing.median_ms if report.candidate_timing else None,
                             "reference_ms": report.reference_timing.median_ms if report.reference_timing else None})
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    print(f"\n{len(rows)} evaluations, {breaches} breaches")
    return 1 if breaches else 0


if __name__ == "__main__":
    sys.exit(main())
