"""Wall time of `kloop eval` as a user runs it (a fresh CLI process, no server), against the
harness's own wall time in its report: what the command costs around the harness (its start-up,
its checks, the harness process's start). With --baseline, the same in an older tree, run by run
in alternation, side by side.

    python benchmarks/cli_latency.py --device cuda --world 1 [--baseline .baseline] [--runs 3]
    python benchmarks/cli_latency.py --device cpu --world 2 --candidate tests/fixtures/candidates/all_reduce_fp32.py --allow-nccl
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from paths import ROOT
from table import print_table


def add_candidate_arguments(parser: argparse.ArgumentParser) -> None:
    """--problem, --candidate (default: the symmetric-memory all_reduce), --device, --world, --allow-nccl."""
    parser.add_argument("--problem", default="all_reduce")
    parser.add_argument("--candidate", type=Path, default=ROOT / "tests/fixtures/candidates/all_reduce_symm.py")
    parser.add_argument("--device", default="cuda", choices=["cuda", "emulate", "cpu"])
    parser.add_argument("--world", type=int, default=1)
    parser.add_argument("--allow-nccl", action="store_true")


def eval_command(args: argparse.Namespace, *extra: str) -> list[str]:
    """``kloop eval --json`` of ``args``' problem, candidate, world and device (and --allow-nccl), then ``extra``."""
    return [sys.executable, "-m", "agent", "eval", args.problem, str(args.candidate.resolve()), "--world", str(args.world),
            "--device", args.device, "--json", *(["--allow-nccl"] if args.allow_nccl else []), *extra]


def timed_eval(command: list[str], cwd: Path, env: dict[str, str],
               timeout_s: float) -> tuple[float, dict | None, subprocess.CompletedProcess]:
    """``command`` (a ``kloop eval --json``) run once: its wall seconds, its report (None when it printed
    none) and the process."""
    started = time.monotonic()
    proc = subprocess.run(command, cwd=cwd, capture_output=True, text=True, env=env, timeout=timeout_s, check=False)
    wall = time.monotonic() - started
    try:
        return wall, json.loads(proc.stdout), proc
    except json.JSONDecodeError:
        return wall, None, proc


def one_run(tree: Path, args: argparse.Namespace) -> dict:
    """One `kloop eval --json` in ``tree``: wall seconds, the harness's, the status."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(tree), os.environ.get("PYTHONPATH", "")]))}
    wall, report, proc = timed_eval(eval_command(args), tree, env, args.timeout_s)
    if report is None:
        return {"wall_s": wall, "harness_s": None, "status": f"exit {proc.returncode}: {(proc.stderr or proc.stdout)[-300:]}"}
    return {"wall_s": wall, "harness_s": report.get("wall_s"), "status": report.get("status")}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_candidate_arguments(parser)
    parser.add_argument("--runs", type=int, default=3, help="runs of each tree (the first of each is a cold one)")
    parser.add_argument("--baseline", type=Path, help="an older checkout to time beside this one")
    parser.add_argument("--timeout-s", type=float, default=300.0)
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    if not args.candidate.is_file():
        parser.error(f"no such candidate: {args.candidate}")
    if args.baseline and not (args.baseline / "agent").is_dir():
        parser.error(f"--baseline {args.baseline}: not a kloop checkout")
    trees = {"this tree": ROOT, **({"baseline": args.baseline.resolve()} if args.baseline else {})}
    rows, outside = [], {name: [] for name in trees}
    for run in range(1, args.runs + 1):
        for name, tree in (trees.items() if run % 2 else reversed(trees.items())):
            result = one_run(tree, args)
            around = result["wall_s"] - result["harness_s"] if result["harness_s"] is not None else None
            if around is not None:
                outside[name].append(around)
            rows.append([name, run, round(result["wall_s"], 2), result["harness_s"], None if around is None else round(around, 2),
                         result["status"]])
            print(f"{name}, run {run}: {result['wall_s']:.2f} s ({result['status']})", flush=True)
    print_table(f"kloop eval {args.problem} --device {args.device} --world {args.world}, a fresh CLI each run",
                ["tree", "run", "wall_s", "harness_s", "around_harness_s", "status"], rows)
    print_table("around the harness (the command's own cost), per tree", ["tree", "median_s", "min_s"],
                [[name, round(statistics.median(values), 2), round(min(values), 2)] for name, values in outside.items() if values])
    return 0 if all(row[-1] == "correct" for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
