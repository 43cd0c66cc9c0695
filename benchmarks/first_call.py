"""A candidate's first calls on a fresh rank, piece by piece: where the correctness stage's
"candidate call" goes on a GPU (its first call sets up symmetric memory and loads its kernel).

Each case runs in a fresh process set up as a candidate's rank is (RankDevice: world 1, the
no-collectives group), without the jail or the harness around it, and prints ms per piece.

    python benchmarks/first_call.py --sizes small default --repeats 3
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from paths import ROOT
from table import print_table

CHILD = r"""
import json, os, sys, time, runpy
started = time.perf_counter()
pieces = {}
def threads():  # this process's threads and the CPUs it may run on: what a set-up may leave behind
    return f"{len(os.listdir('/proc/self/task'))} threads, {len(os.sched_getaffinity(0))} cpus"
def took(name, since):
    now = time.perf_counter(); pieces[name] = round((now - since) * 1000, 2); return now
import torch
t = took("import torch", started)
from sandbox.rank.device import RankDevice
from problems import find_problem
device = RankDevice(0, 1, sys.argv[4], sys.argv[1], collectives=False)
t = took("rank device (cuda init, group, flushes, calibration)", t)
pieces["after rank device"] = threads()
import kloop_runtime, kloop_runtime.symmetric as symmetric
if sys.argv[5] == "prewarm":
    device.prewarm_symmetric_memory(); device.synchronize()
    t = took("prewarm_symmetric_memory", t)
    pieces["after prewarm"] = threads()
for owner, name in ((symmetric.SymmetricBuffer, "__init__"), (kloop_runtime, "load_kernel")):
    original = getattr(owner, name)
    def timed(*args, _original=original, _name=name, **kwargs):
        since = time.perf_counter()
        try:
            return _original(*args, **kwargs)
        finally:
            device.synchronize()
            pieces[f"  in call 1: {_name}"] = round(pieces.get(f"  in call 1: {_name}", 0) + (time.perf_counter() - since) * 1000, 2)
    setattr(owner, name, timed)
problem = find_problem("all_reduce")
shape = problem.spec.shapes[sys.argv[2]]
inputs = [x.to(device.device) for x in problem.inputs(0, 1, torch.Generator().manual_seed(1), "cpu", torch.bfloat16, shape)]
device.synchronize()
t = took("inputs", t)
solution = runpy.run_path(sys.argv[3])["solution"]
t = took("candidate import", t)
pieces["before call 1"] = threads()
for call in range(1, 4):
    solution(*inputs); device.synchronize()
    t = took(f"call {call}", t)
pieces["after call 3"] = threads()
print("PIECES " + json.dumps(pieces))
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", nargs="+", default=["small", "default"])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"], help="cpu: checks this script without a GPU")
    parser.add_argument("--candidate", type=Path, default=ROOT / "tests/fixtures/candidates/all_reduce_symm.py")
    args = parser.parse_args(argv)
    rows, names = [], []
    for size, variant in [(size, variant) for size in args.sizes for variant in ("plain", "prewarm")]:
        for repeat in range(args.repeats):
            with tempfile.TemporaryDirectory() as folder:
                started = time.perf_counter()
                done = subprocess.run([sys.executable, "-c", CHILD, str(Path(folder) / "store"), size, str(args.candidate), args.device, variant],
                                      cwd=ROOT, capture_output=True, text=True, timeout=300)
                wall = (time.perf_counter() - started) * 1000
            line = next((x for x in done.stdout.splitlines() if x.startswith("PIECES ")), None)
            if line is None:
                print(f"{size} {variant} #{repeat}: failed\n{done.stderr[-3000:]}", flush=True)
                continue
            pieces = json.loads(line[len("PIECES "):])
            print(f"{size} {variant} #{repeat}: {pieces}", flush=True)
            names += [name for name in pieces if name not in names]
            rows.append((size, variant, repeat, round(wall), pieces))
    print_table("a candidate's first calls on a fresh rank (ms; prewarm: RankDevice.prewarm_symmetric_memory before the candidate)",
                ["size", "variant", "#", "process_ms", *names], [[*row[:4], *[row[4].get(name) for name in names]] for row in rows])
    return 0


if __name__ == "__main__":
    sys.exit(main())
