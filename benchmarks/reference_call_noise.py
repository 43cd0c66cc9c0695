"""The all_reduce reference's own call at world 1, timed as a rank times it (the L2 flush, a
device-wide sync, CUDA events), in several fresh processes: is its spread the call's own (NCCL's
host path, the allocator) or the process's? Five jobs of one candidate read the reference at
0.28-0.35 ms a call (min 0.16-0.21, interquartile range 0.11 ms) against a 64 MiB copy's 0.08 ms
(benchmarks/timing_stability.py, 2026-12-03).

    python benchmarks/reference_call_noise.py [--processes 3] [--calls 60] [--mib 64] [--pinned]
    python benchmarks/reference_call_noise.py --layouts [--processes 6]

With --pinned, each process runs as often again pinned to one CPU of its own (sched_setaffinity):
is the spread where the host schedules the process? With --layouts, processes of three kinds in
turn: as a rank starts now (a random string-hash seed, addresses randomised), with one fixed layout
(PYTHONHASHSEED=0, no address randomisation), and with that fixed layout on each CPU in turn: is the
spread the process's memory layout, or the CPU it runs on? Every process also times the reference
with the GPU still busy with the flush when the interval starts, the host's launch hidden: is the
spread the host's share of the call?
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from paths import ROOT  # noqa: F401 - puts the repository on sys.path
from table import SPREAD_HEADER, print_table, spread

CASES = ("clone + all_reduce (the reference)", "clone", "all_reduce in place", "empty interval")
BUSY_CASE = "the reference, GPU busy at the start"
ADDR_NO_RANDOMIZE = 0x0040000  # personality(2): no address-space randomisation, kept across exec


def measure(mib: int, calls: int, folder: str) -> dict[str, list[float]]:
    import torch

    from sandbox.rank.device import RankDevice

    device = RankDevice(0, 1, "cuda", str(Path(folder) / "store"), collectives=True)
    dist = device.dist
    source = torch.randn(mib * 2**19, device="cuda", dtype=torch.bfloat16)  # mib MiB of bf16 (2 bytes an element)
    held = torch.empty_like(source)

    def reference():
        out = source.clone()
        dist.all_reduce(out)
        return out

    bodies = {CASES[0]: reference, CASES[1]: source.clone, CASES[2]: lambda: dist.all_reduce(held), CASES[3]: lambda: None}
    times: dict[str, list[float]] = {name: [] for name in bodies}
    times[BUSY_CASE] = []
    for _ in range(calls + 5):  # the first five of each: warm-up
        for name, body in bodies.items():
            device.flush_l2(device.flushes)
            _, ms = device.timed(body)
            times[name].append(ms)
        device.flush_l2(device.flushes)  # no sync: the interval starts while the flushes still run
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        reference()
        end.record()
        end.synchronize()
        times[BUSY_CASE].append(start.elapsed_time(end))
    dist.destroy_process_group()
    return {name: values[5:] for name, values in times.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--processes", type=int, default=3)
    parser.add_argument("--calls", type=int, default=60)
    parser.add_argument("--mib", type=int, default=64)
    parser.add_argument("--pinned", action="store_true", help="also run each process pinned to one CPU")
    parser.add_argument("--layouts", action="store_true", help="random vs fixed process layouts, and the fixed one on each CPU")
    parser.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)  # the CPU to pin to, or -1
    args = parser.parse_args(argv)
    if args.layouts and args.child is None:
        return layouts(args)
    if args.child is not None:
        if args.child >= 0:
            os.sched_setaffinity(0, {args.child})
        with tempfile.TemporaryDirectory() as folder:
            print(json.dumps(measure(args.mib, args.calls, folder)))
        return 0
    cpus = sorted(os.sched_getaffinity(0))
    runs = [-1] * args.processes + ([cpus[(2 * i + 1) % len(cpus)] for i in range(args.processes)] if args.pinned else [])
    rows = []
    for process, cpu in enumerate(runs, start=1):
        done = subprocess.run([sys.executable, __file__, "--child", str(cpu), "--calls", str(args.calls), "--mib", str(args.mib)],
                              capture_output=True, text=True, check=True)
        for name, values in json.loads(done.stdout.strip().splitlines()[-1]).items():
            rows.append([process, "all" if cpu < 0 else cpu, name, *spread(values)])
    print_table(f"a rank's timed call at world 1, {args.mib} MiB bf16, flushed, {args.calls} calls, in {len(runs)} fresh "
                "processes", ["process", "cpus", "body", *SPREAD_HEADER], rows)
    return 0


def _fixed_layout() -> None:
    ctypes.CDLL(None, use_errno=True).personality(ADDR_NO_RANDOMIZE)


def child_medians(cpu: int, args: argparse.Namespace, fixed: bool) -> dict[str, float]:
    """One fresh process's median of each body (``cpu`` -1: unpinned)."""
    env = {**os.environ, **({"PYTHONHASHSEED": "0"} if fixed else {})}
    if not fixed:
        env.pop("PYTHONHASHSEED", None)
    done = subprocess.run([sys.executable, __file__, "--child", str(cpu), "--calls", str(args.calls), "--mib", str(args.mib)],
                          capture_output=True, text=True, check=True, env=env, preexec_fn=_fixed_layout if fixed else None)
    return {name: statistics.median(values) for name, values in json.loads(done.stdout.strip().splitlines()[-1]).items()}


def layouts(args: argparse.Namespace) -> int:
    cpus = sorted(os.sched_getaffinity(0))
    kinds: dict[str, list[tuple[int, dict[str, float]]]] = {"random layout": [], "fixed layout": [], "fixed layout, one CPU": []}
    for process in range(args.processes):  # the kinds in turn, so that a drift of the machine reaches each alike
        cpu = cpus[(process * max(1, len(cpus) // args.processes)) % len(cpus)]
        for kind, pin, fixed in (("random layout", -1, False), ("fixed layout", -1, True), ("fixed layout, one CPU", cpu, True)):
            medians = child_medians(pin, args, fixed)
            kinds[kind].append((pin, medians))
            print(f"{kind} process {process + 1}{f' on CPU {pin}' if pin >= 0 else ''}: "
                  + ", ".join(f"{name} {ms:.4f}" for name, ms in medians.items()), flush=True)
    rows = []
    for kind, runs in kinds.items():
        for name in (CASES[0], BUSY_CASE, CASES[1], CASES[3]):
            values = [medians[name] for _, medians in runs]
            rows.append([kind, name, len(values), round(min(values), 4), round(max(values), 4), round(max(values) / min(values), 3)])
    print_table(f"medians of a rank's timed call per fresh process, world 1, {args.mib} MiB bf16, {args.calls} calls each",
                ["processes", "body", "n", "least_median_ms", "most_median_ms", "max/min"], rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
