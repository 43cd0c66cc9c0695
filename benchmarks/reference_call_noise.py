"""The all_reduce reference's own call at world 1, timed as a rank times it (the L2 flush, a
device-wide sync, CUDA events), in several fresh processes: is its spread the call's own (NCCL's
host path, the allocator) or the process's? Five jobs of one candidate read the reference at
0.28-0.35 ms a call (min 0.16-0.21, interquartile range 0.11 ms) against a 64 MiB copy's 0.08 ms
(benchmarks/timing_stability.py, 2026-12-03).

    python benchmarks/reference_call_noise.py [--processes 3] [--calls 60] [--mib 64]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from paths import ROOT  # noqa: F401 - puts the repository on sys.path
from table import SPREAD_HEADER, print_table, spread

CASES = ("clone + all_reduce (the reference)", "clone", "all_reduce in place", "empty interval")


def measure(mib: int, calls: int, folder: str) -> dict[str, list[float]]:
    import torch

    from sandbox.rank.device import RankDevice

    device = RankDevice(0, 1, "cuda", str(Path(folder) / "store"), collectives=True)
    dist = device.dist
    source = torch.randn(mib * 2**18, device="cuda").to(torch.bfloat16)  # mib MiB of bf16
    held = torch.empty_like(source)

    def reference():
        out = source.clone()
        dist.all_reduce(out)
        return out

    bodies = {CASES[0]: reference, CASES[1]: source.clone, CASES[2]: lambda: dist.all_reduce(held), CASES[3]: lambda: None}
    times: dict[str, list[float]] = {name: [] for name in bodies}
    for _ in range(calls + 5):  # the first five of each: warm-up
        for name, body in bodies.items():
            device.flush_l2()
            _, ms = device.timed(body)
            times[name].append(ms)
    dist.destroy_process_group()
    return {name: values[5:] for name, values in times.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--processes", type=int, default=3)
    parser.add_argument("--calls", type=int, default=60)
    parser.add_argument("--mib", type=int, default=64)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        with tempfile.TemporaryDirectory() as folder:
            print(json.dumps(measure(args.mib, args.calls, folder)))
        return 0
    rows = []
    for process in range(args.processes):
        done = subprocess.run([sys.executable, __file__, "--child", "--calls", str(args.calls), "--mib", str(args.mib)],
                              capture_output=True, text=True, check=True)
        for name, values in json.loads(done.stdout.strip().splitlines()[-1]).items():
            rows.append([process + 1, name, *spread(values)])
    print_table(f"a rank's timed call at world 1, {args.mib} MiB bf16, flushed, {args.calls} calls, in {args.processes} fresh "
                "processes", ["process", "body", *SPREAD_HEADER], rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
