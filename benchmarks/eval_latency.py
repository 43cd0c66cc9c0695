"""Wall time of one full evaluation (correctness trials + timing), cold and warm, per stage.

Cold: empty compile cache, reference cache and seed secret. Warm: the same evaluation again.

    python benchmarks/eval_latency.py --device cuda --world 1            # the H200 target
    python benchmarks/eval_latency.py --device cpu --world 2 --candidate tests/fixtures/candidates/all_reduce_fp32.py --allow-nccl

Each run is a separate harness job in a fresh local sandbox (what `kloop eval` does, less the CLI's
own start-up); the profile stage is left out unless --profile.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from common import ROOT, HarnessConfig, LocalSandbox, evaluate_in, print_table

from sandbox.harness.config import DEVICE_MODES

STAGES = ("static", "startup", "build", "correctness", "performance", "recheck", "profile", "teardown")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--problem", default="all_reduce")
    parser.add_argument("--candidate", default=str(ROOT / "tests/fixtures/candidates/all_reduce_symm.py"))
    parser.add_argument("--device", default="cuda", choices=DEVICE_MODES)
    parser.add_argument("--world", type=int, default=1)
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--warm-runs", type=int, default=2)
    parser.add_argument("--profile", action="store_true", help="include the profile stage")
    parser.add_argument("--allow-nccl", action="store_true")
    parser.add_argument("--json", type=Path, help="also write the rows here")
    args = parser.parse_args(argv)

    source = Path(args.candidate).read_text()
    config = HarnessConfig(problem=args.problem, world=args.world, device=args.device, trials=args.trials,
                           profile=args.profile, allow_nccl=args.allow_nccl)
    rows = []
    with tempfile.TemporaryDirectory(prefix="kloop-bench-cache-") as cache:
        for run in range(1 + args.warm_runs):
            label = "cold" if run == 0 else f"warm {run}"
            with LocalSandbox(env={"KLOOP_CACHE_DIR": cache}) as box:
                started = time.monotonic()
                report = evaluate_in(box, source, config)
                wall = time.monotonic() - started
            if report.status != "correct":
                print(f"{label}: {report.status}: {report.message}", file=sys.stderr)
                return 1
            rows.append({"run": label, "wall_s": round(wall, 2), "harness_s": report.wall_s,
                         **{stage: report.stage_wall_s.get(stage) for stage in STAGES}, "speedup": report.speedup,
                         "speedup_ci": "-" if not report.speedup_ci else f"{report.speedup_ci[0]:.2f}-{report.speedup_ci[1]:.2f}"})
            print(f"{label}: {report.status} in {wall:.2f} s", flush=True)
            if report.candidate_timing and report.reference_timing:
                print(f"   timing: reference {report.reference_timing.median_ms:.4f} ms, candidate {report.candidate_timing.median_ms:.4f} "
                      f"ms a call, {report.candidate_timing.iterations} calls in {report.candidate_timing.rounds} rounds", flush=True)
            print(f"   where: {dict(list(report.harness_breakdown_s.items())[:10])}", flush=True)
    header = ["run", "wall_s", "harness_s", *STAGES, "speedup", "speedup_ci"]
    print_table(f"eval latency: {args.problem}, {args.device}, world {args.world}, {args.trials} trials + recheck + timing"
                f"{' + profile' if args.profile else ''}", header, [[row[h] for h in header] for row in rows])
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
