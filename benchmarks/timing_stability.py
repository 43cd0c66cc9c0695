"""Timing stability: the same candidate measured in several separate jobs; max/min spread of
the reported time, for the candidate and for the reference.

    python benchmarks/timing_stability.py --world 8 --repeats 5             # every oracle
    python benchmarks/timing_stability.py --world 1 --problems all_reduce --candidate tests/candidates/all_reduce_symm.py
"""

from __future__ import annotations

import argparse
from pathlib import Path

from common import evaluate, print_table, problems_with_oracles


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--world", type=int, default=8)
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--problems", nargs="*")
    parser.add_argument("--candidate", help="a solution file (default: each problem's oracle)")
    parser.add_argument("--size", default=None)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--allow-nccl", action="store_true")
    args = parser.parse_args()
    rows = []
    if args.candidate:
        from problems import get_problem

        targets = [(get_problem(name), Path(args.candidate).read_text()) for name in (args.problems or [])]
    else:
        targets = [(p, p.oracle_path.read_text()) for p in problems_with_oracles(args.problems)]
    for problem, source in targets:
        if args.world != 1 and args.world not in problem.spec.world_sizes:
            continue
        candidate_ms, reference_ms, fastest_ms, overhead_ms = [], [], [], []
        for _ in range(args.repeats):
            report = evaluate(source, problem=problem.name, world=args.world, device=args.device, size=args.size,
                              reference_cache=False, profile=False, allow_nccl=args.allow_nccl)
            if report.status != "correct":
                print(f"{problem.name}: {report.status}: {report.message}")
                break
            candidate_ms.append(report.candidate_timing.median_ms)
            reference_ms.append(report.reference_timing.median_ms)
            fastest_ms.append(min(report.candidate_timing.min_ms, report.reference_timing.min_ms))
            overhead_ms.append(report.reference_timing.sync_overhead_ms)
            print(f"{problem.name} job {len(candidate_ms)}/{args.repeats}: candidate {candidate_ms[-1]:.4f} ms, "
                  f"reference {reference_ms[-1]:.4f} ms, fastest iteration {fastest_ms[-1]:.4f} ms, "
                  f"reference sync overhead {overhead_ms[-1]:.4f} ms ({report.wall_s:.0f} s)", flush=True)
        if len(candidate_ms) == args.repeats:
            rows.append([problem.name, args.repeats, min(candidate_ms), max(candidate_ms), max(candidate_ms) / min(candidate_ms),
                         min(reference_ms), max(reference_ms), max(reference_ms) / min(reference_ms), min(fastest_ms),
                         f"{min(overhead_ms):.4f}-{max(overhead_ms):.4f}"])
    print_table(f"timing stability over {args.repeats} separate jobs, world {args.world}, {args.device}",
                ["problem", "jobs", "cand min ms", "cand max ms", "cand max/min", "ref min ms", "ref max ms", "ref max/min",
                 "fastest iteration ms", "ref sync overhead ms"], rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
