"""The hostile corpus against the judge, as a table: attack | world | verdict | speedup | caught-by.

    python benchmarks/hostile_report.py                       # CPU, worlds 2 4 8, every fixture
    python benchmarks/hostile_report.py --worlds 2 --only timed_claims_zero,spin_while_reference_runs
    python benchmarks/hostile_report.py --device cuda --worlds 1          # the GPU fixtures on an H200
    python benchmarks/hostile_report.py --device emulate --worlds 2 4
    python benchmarks/hostile_report.py --worlds 2 --repeat 8 --load 2 --only all_reduce_reference_copy,work_after_timer
                                                    # each case 8 times beside 2 busy processes (a loaded CI host)

A row ends in OK when the verdict is one the fixture may get (tests/support/hostile_corpus.py), else in
BREACH with the reason; with --repeat, a summary per case follows (how often OK, the verdicts, the
speedups). Fixtures run through one long-lived harness per device mode (the path of
batches and the service).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support import hostile_corpus as hc


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda", "emulate"))
    parser.add_argument("--worlds", nargs="+", type=int, default=None)
    parser.add_argument("--only", default="", help="comma-separated fixture names")
    parser.add_argument("--json", type=Path, help="also write the rows here")
    parser.add_argument("--repeat", type=int, default=1, help="evaluate each case this many times")
    parser.add_argument("--load", type=int, default=0, help="busy processes running beside the evaluations")
    args = parser.parse_args()
    worlds = args.worlds or ([1] if args.device == "cuda" else [2, 4] if args.device == "emulate" else [2, 4, 8])
    wanted = {n for n in args.only.split(",") if n}
    fixture_device = "cpu" if args.device == "cpu" else "any"
    fixtures = [f for kind in ("honest", "hostile") for f in hc.corpus(kind, device=fixture_device)
                if not wanted or f.name in wanted]

    from sandbox.backends import LocalSandbox
    from sandbox.evaluate import WarmEvaluator

    rows = []
    print(f"{'attack':40} {'world':>5} {'verdict':12} {'speedup':>8}  caught-by", flush=True)
    with _busy(args.load), LocalSandbox() as box, WarmEvaluator(box) as evaluator:
        for fixture in fixtures:
            for world in worlds:
                if args.device == "cpu" and world not in fixture.worlds:
                    continue
                rows += [_judged(evaluator, box, fixture, world, args.device) for _ in range(args.repeat)]
    breaches = sum(bool(row["problems"]) and not row["known_hole"] for row in rows)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    if args.repeat > 1:
        _summary(rows)
    print(f"\n{len(rows)} evaluations, {breaches} breaches")
    return 1 if breaches else 0


def _judged(evaluator, box, fixture, world: int, device: str) -> dict:
    """One evaluation of ``fixture``, printed as a row."""
    started = time.time()
    report = evaluator.evaluate(fixture.source(), hc.config(fixture, world, device=device))
    problems = hc.verdict_problems(fixture, report)
    problems += [f"left {p}" for p in hc.existing_leaves(hc.leaf_patterns(fixture, box.workdir), started)]
    problems += [f"orphan {p}" for p in hc.orphans(box.workdir, wait_s=3.0)]
    speedup = "-" if report.speedup is None else f"{report.speedup:.2f}"
    label = f"KNOWN HOLE ({fixture.known_hole[:60]})" if fixture.known_hole else "BREACH"
    verdict = f"{label}: " + "; ".join(problems)[:200] if problems else "OK"
    print(f"{fixture.id:40} {world:>5} {report.status:12} {speedup:>8}  {hc.caught_by(report)}  [{verdict}] "
          f"({time.time() - started:.0f} s)", flush=True)
    return {"fixture": fixture.id, "world": world, "device": device, "status": report.status, "speedup": report.speedup,
            "message": report.message, "stage": report.stage, "problems": problems, "known_hole": bool(fixture.known_hole),
            "wall_s": round(time.time() - started, 1),
            "timing_check": report.timing_check.model_dump() if report.timing_check else None,
            "candidate_ms": report.candidate_timing.median_ms if report.candidate_timing else None,
            "reference_ms": report.reference_timing.median_ms if report.reference_timing else None}


@contextlib.contextmanager
def _busy(count: int):
    """``count`` processes spinning on a core each, for as long as the block runs."""
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]
    try:
        yield
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()


def _summary(rows: list[dict]) -> None:
    cases = collections.defaultdict(list)
    for row in rows:
        cases[(row["fixture"], row["world"])].append(row)
    print(f"\n{'case':40} {'world':>5} {'OK':>7}  {'verdicts':28} speedups (median, max)")
    for (fixture, world), runs in cases.items():
        verdicts = collections.Counter(r["status"] for r in runs)
        speedups = [r["speedup"] for r in runs if r["speedup"] is not None]
        spread = f"{statistics.median(speedups):.2f}, {max(speedups):.2f}" if speedups else "-"
        print(f"{fixture:40} {world:>5} {sum(not r['problems'] for r in runs):>3}/{len(runs):<3}  "
              f"{', '.join(f'{k} {v}' for k, v in verdicts.most_common()):28} {spread}")


if __name__ == "__main__":
    sys.exit(main())
