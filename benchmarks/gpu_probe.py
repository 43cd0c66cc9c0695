"""The judge on a GPU, one line per case: candidates in emulate (2, 4 ranks on one GPU) and cuda
mode (world 1, timed and profiled), a candidate that calls NCCL where it is not allowed, and a
cold/warm latency pair. For the device machine:

    python benchmarks/gpu_probe.py [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from common import ROOT, HarnessConfig, LocalSandbox, evaluate_in

CASES = [
    ("symm emulate w2", "tests/fixtures/candidates/all_reduce_symm.py", dict(device="emulate", world=2)),
    ("symm emulate w4", "tests/fixtures/candidates/all_reduce_symm.py", dict(device="emulate", world=4)),
    ("symm cuda w1", "tests/fixtures/candidates/all_reduce_symm.py", dict(device="cuda", world=1)),
    ("fp32 nccl cuda w1", "tests/fixtures/candidates/all_reduce_fp32.py", dict(device="cuda", world=1, allow_nccl=True)),
    ("fp32 no-nccl cuda w1", "tests/fixtures/candidates/all_reduce_fp32.py", dict(device="cuda", world=1, allow_nccl=False)),
]


def line(name: str, report, wall: float) -> dict:
    row = {"case": name, "status": report.status, "wall_s": round(wall, 2), "message": report.message[:220],
           "stages": report.stage_wall_s, "speedup": report.speedup, "ci": report.speedup_ci,
           "ref_ms": report.reference_timing.median_ms if report.reference_timing else None,
           "cand_ms": report.candidate_timing.median_ms if report.candidate_timing else None,
           "clock": report.timing_check.model_dump() if report.timing_check else None,
           "breakdown": report.harness_breakdown_s, "roofline": report.roofline_fraction, "isolation": report.isolation, "notes": report.notes}
    print(f"{name}: {report.status} in {wall:.1f} s: {report.message[:200]}", flush=True)
    print(f"   stages {report.stage_wall_s}", flush=True)
    print(f"   breakdown {dict(list(report.harness_breakdown_s.items())[:12])}", flush=True)
    if report.timing_check:
        print(f"   ref {row['ref_ms']} ms cand {row['cand_ms']} ms speedup {report.speedup} ci {report.speedup_ci} "
              f"clock {report.timing_check.model_dump()}", flush=True)
    if report.status == "crashed":
        for excerpt in report.logs[:2]:
            print("   log", excerpt.name, excerpt.text()[-1500:].replace("\n", "\n      "), flush=True)
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    try:
        from torch._C._distributed_c10d import FakeProcessGroup

        print("FakeProcessGroup.Options.error_on_collective:", hasattr(FakeProcessGroup.Options(), "error_on_collective"), flush=True)
    except Exception as error:  # noqa: BLE001
        print("FakeProcessGroup:", error, flush=True)
    rows = []
    with tempfile.TemporaryDirectory(prefix="kloop-probe-cache-") as cache:
        for name, path, options in CASES:
            config = HarnessConfig(problem="all_reduce", trials=3, **options)
            with LocalSandbox(env={"KLOOP_CACHE_DIR": cache}) as box:
                started = time.monotonic()
                report = evaluate_in(box, (ROOT / path).read_text(), config)
                rows.append(line(name, report, time.monotonic() - started))
        for label in ("latency cold", "latency warm", "latency warm 2"):
            fresh = label == "latency cold"
            with tempfile.TemporaryDirectory(prefix="kloop-probe-cold-") as cold:
                with LocalSandbox(env={"KLOOP_CACHE_DIR": cold if fresh else cache}) as box:
                    started = time.monotonic()
                    report = evaluate_in(box, (ROOT / "tests/fixtures/candidates/all_reduce_symm.py").read_text(),
                                         HarnessConfig(problem="all_reduce", device="cuda", world=1))
                    rows.append(line(label, report, time.monotonic() - started))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
