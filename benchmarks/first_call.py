"""A candidate's first calls on a fresh rank, piece by piece: where the correctness stage's
"candidate call" goes on a GPU (its first call sets up symmetric memory and loads its kernel).

Each case runs in a fresh process set up as a candidate's rank is (RankDevice: world 1, the
no-collectives group), without the jail or the harness around it, and prints ms per piece; the
variant ``shape_checks`` imports what a group's zygote imports ahead for such candidates
(sandbox.rank.zygote.SHAPE_CHECKS). ``--steps``: a process's first symmetric buffer instead, torch
call by torch call (on the H200 the first ``symm_mem.empty`` took 2.0-4.4 s, nearly all of it
importing sympy for torch's shape check; TORCH_SYMMMEM=CUDA or TORCH_SYMMMEM_IMPLICIT_POOL=0 in the
environment changed nothing).

    python benchmarks/first_call.py --sizes small default --repeats 3
    python benchmarks/first_call.py --steps --repeats 2
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

IMPORT_SHAPE_CHECKS = r"""
def import_shape_checks():  # what a candidate group's zygote imports ahead
    import importlib
    from sandbox.rank.zygote import SHAPE_CHECKS
    importlib.import_module(SHAPE_CHECKS)
"""
CHILD = IMPORT_SHAPE_CHECKS + r"""
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
if sys.argv[5] == "shape_checks":
    import_shape_checks()
    t = took("import shape checks", t)
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


STEPS = IMPORT_SHAPE_CHECKS + r"""
import json, os, sys, time
import torch, torch.distributed as dist
pieces, t = {}, time.perf_counter()
def took(name):
    global t
    torch.cuda.synchronize(); now = time.perf_counter(); pieces[name] = round((now - t) * 1000, 2); t = now
torch.cuda.init(); torch.zeros(1, device="cuda"); took("cuda init")
dist.init_process_group("gloo", store=dist.FileStore(sys.argv[1], 1), rank=0, world_size=1); took("group")
import torch.distributed._symmetric_memory as symm_mem; took("import symm_mem")
if sys.argv[2] == "shape_checks":
    import_shape_checks(); took("import shape checks")
if hasattr(symm_mem, "get_backend"):
    pieces["backend"] = str(symm_mem.get_backend("cuda")); took("get_backend")
if hasattr(symm_mem, "is_nvshmem_available"):
    pieces["nvshmem"] = str(symm_mem.is_nvshmem_available()); took("is_nvshmem_available")
if hasattr(symm_mem, "enable_symm_mem_for_group"):
    symm_mem.enable_symm_mem_for_group(dist.group.WORLD.group_name); took("enable_symm_mem_for_group")
buffer = symm_mem.empty(1, dtype=torch.uint32, device="cuda"); took("empty 1")
handle = symm_mem.rendezvous(buffer, dist.group.WORLD); took("rendezvous 1")
second = symm_mem.empty(1 << 20, dtype=torch.uint32, device="cuda"); took("empty 2")
symm_mem.rendezvous(second, dist.group.WORLD); took("rendezvous 2")
print("PIECES " + json.dumps(pieces))
"""
VARIANTS = ("plain", "shape_checks")


def measure(cases: list[tuple[tuple, str, list[str]]]) -> tuple[list[list], list[str]]:
    """Each case (its label, a child's code, its arguments after the store path) in a fresh process:
    the table's rows (label, the process's wall ms, each piece) and the pieces' names."""
    measured, names = [], []
    for label, code, args in cases:
        with tempfile.TemporaryDirectory() as folder:
            started = time.perf_counter()
            done = subprocess.run([sys.executable, "-c", code, str(Path(folder) / "store"), *args], cwd=ROOT, capture_output=True,
                                  text=True, timeout=300)
            wall = (time.perf_counter() - started) * 1000
        line = next((x for x in done.stdout.splitlines() if x.startswith("PIECES ")), None)
        name = " ".join(map(str, label))
        if line is None:
            print(f"{name}: failed\n{done.stderr[-3000:]}", flush=True)
            continue
        pieces = json.loads(line[len("PIECES "):])
        print(f"{name}: {pieces}", flush=True)
        names += [piece for piece in pieces if piece not in names]
        measured.append((label, round(wall), pieces))
    return [[*label, wall, *[pieces.get(n) for n in names]] for label, wall, pieces in measured], names


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", nargs="+", default=["small", "default"])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS,
                        help="shape_checks: the process imports sandbox.rank.zygote.SHAPE_CHECKS first")
    parser.add_argument("--steps", action="store_true", help="instead: a first symmetric buffer, torch call by torch call")
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"], help="cpu: checks this script without a GPU")
    parser.add_argument("--candidate", type=Path, default=ROOT / "tests/fixtures/candidates/all_reduce_symm.py")
    args = parser.parse_args(argv)
    if args.steps:
        cases = [((variant, repeat), STEPS, [variant]) for variant in args.variants for repeat in range(args.repeats)]
        rows, names = measure(cases)
        print_table("a process's first symmetric buffer, torch call by torch call (ms)", ["variant", "#", "process_ms", *names], rows)
    else:
        cases = [((size, variant, repeat), CHILD, [size, str(args.candidate), args.device, variant])
                 for size in args.sizes for variant in args.variants for repeat in range(args.repeats)]
        rows, names = measure(cases)
        print_table("a candidate's first calls on a fresh rank (ms; shape_checks: imported first, as a zygote does)",
                    ["size", "variant", "#", "process_ms", *names], rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
