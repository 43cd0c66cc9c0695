"""Oracle vs reference: speedup, achieved bandwidth and roofline fraction per problem and size.

    python benchmarks/oracles.py --world 8                 # every oracle, every timed size
    python benchmarks/oracles.py --world 1 --problems all_reduce --sizes default latency

Each row is one evaluation job (reference and oracle timed side by side in it, no cached
reference timing).
"""

from __future__ import annotations

import argparse
import json

from common import evaluate, print_table, problems_with_oracles


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--world", type=int, default=8)
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--problems", nargs="*")
    parser.add_argument("--sizes", nargs="*", help="named sizes (default: every size but `small`)")
    parser.add_argument("--json", help="also write the rows here")
    args = parser.parse_args()
    rows, records = [], []
    for problem in problems_with_oracles(args.problems):
        if args.world != 1 and args.world not in problem.spec.world_sizes:
            continue
        sizes = args.sizes or [s for s in problem.spec.shapes if s != "small"]
        for size in sizes:
            if size not in problem.spec.shapes:
                continue
            report = evaluate(problem.oracle_path.read_text(), problem=problem.name, world=args.world, device=args.device, size=size,
                              reference_cache=False, profile=False)
            ref, cand = report.reference_timing, report.candidate_timing
            rows.append([problem.name, size, report.status, ref.median_ms if ref else None, cand.median_ms if cand else None,
                         report.speedup, report.achieved_comm_gbps, report.roofline.bound_ms if report.roofline else None,
                         report.roofline_fraction, report.roofline.limiter if report.roofline else None,
                         report.reference_analysis.roofline_fraction if report.reference_analysis else None])
            records.append(report.model_dump(mode="json"))
            print(f"{problem.name} {size}: {report.status} {report.message}", flush=True)
    print_table(f"oracle vs reference, world {args.world}, {args.device}",
                ["problem", "size", "status", "ref ms", "oracle ms", "speedup", "GB/s/rank", "roofline ms", "of roofline", "limiter",
                 "reference of roofline"], rows)
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(records, handle, indent=1)
    return 0 if all(r[2] == "correct" for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
