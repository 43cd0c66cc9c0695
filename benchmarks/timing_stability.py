"""Timing stability: the same candidate measured in several separate jobs; max/min spread of
the reported speedup (and of the candidate's and the reference's times), with each job's 95%
interval. Goal: max/min of the speedup <= 1.10 for calls of 0.02-1 ms, <= 1.03 above 1 ms.

    python benchmarks/timing_stability.py --world 8 --repeats 5             # every oracle
    python benchmarks/timing_stability.py --world 1 --problems all_reduce --candidate tests/fixtures/candidates/all_reduce_symm.py
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from common import clock_line, evaluate, print_table, problems_with_oracles
from machine_watch import MachineWatch, line


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--world", type=int, default=8)
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--problems", nargs="*")
    parser.add_argument("--candidate", help="a solution file (default: each problem's oracle)")
    parser.add_argument("--size", default=None)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--allow-nccl", action="store_true")
    parser.add_argument("--warm-up-ms", type=float, nargs="+", default=[None],
                        help="the L2 flush's warm-up before a timed call (HarnessConfig.warm_up_ms); several: the jobs take "
                             "them in turn, a row each (default: the judge's own)")
    parser.add_argument("--timing-precision", type=float, nargs="+", default=[None],
                        help="the speedup's asked 95%% half-width (HarnessConfig.timing_precision: timing goes on past the planned "
                             "calls while it is wider and within reach); several: the jobs take them in turn, with every warm-up, "
                             "a row each (default: the judge's own)")
    parser.add_argument("--json", type=Path, help="also write every job's numbers here")
    args = parser.parse_args(argv)
    rows, records = [], []
    if args.candidate:
        from problems import get_problem

        targets = [(get_problem(name), Path(args.candidate).read_text()) for name in (args.problems or [])]
    else:
        targets = [(p, p.oracle_path.read_text()) for p in problems_with_oracles(args.problems)]
    with MachineWatch() as watch:  # each job's window: what else the machine did meanwhile
        for problem, source in targets:
            if args.world != 1 and args.world not in problem.spec.world_sizes:
                continue
            # a setting's jobs: candidate, reference, fastest and overhead ms, speedups, intervals, machine windows, and the
            # reference's device ms (its launch hidden; None off a GPU), a list each
            settings = [(warm_up, precision) for warm_up in args.warm_up_ms for precision in args.timing_precision]
            jobs = {setting: [[] for _ in range(8)] for setting in settings}
            for job in range(args.repeats * len(jobs)):
                warm_up, precision = settings[job % len(settings)]
                candidate_ms, reference_ms, fastest_ms, overhead_ms, speedups, intervals, machine, device_ms = jobs[warm_up, precision]
                chosen = {"warm_up_ms": warm_up, "timing_precision": precision}
                began = time.monotonic()
                report = evaluate(source, problem=problem.name, world=args.world, device=args.device, size=args.size,
                                  profile=False, allow_nccl=args.allow_nccl, **{k: v for k, v in chosen.items() if v is not None})
                if report.status != "correct" or report.speedup is None:  # no speedup: the judge's notes say why (a call below the timer)
                    print(f"{problem.name}: {report.status}: {report.message}; " + "; ".join(report.notes))
                    break
                candidate_ms.append(report.candidate_timing.median_ms)
                reference_ms.append(report.reference_timing.median_ms)
                fastest_ms.append(min(report.candidate_timing.min_ms, report.reference_timing.min_ms))
                overhead_ms.append(report.reference_timing.sync_overhead_ms)
                device_ms.append(report.reference_device_ms)
                speedups.append(report.speedup)
                intervals.append(report.speedup_ci)
                machine.append(watch.window(began, time.monotonic()))
                ci = f" [{report.speedup_ci[0]:.3f}, {report.speedup_ci[1]:.3f}]" if report.speedup_ci else ""
                label = "" if len(settings) == 1 else f" ({_setting(warm_up, precision)})"
                print(f"{problem.name} job {len(candidate_ms)}/{args.repeats}{label}: speedup {report.speedup:.3f}{ci} over "
                      f"{report.candidate_timing.rounds} rounds, {report.candidate_timing.iterations} calls "
                      f"({report.candidate_timing.l2_policy}), "
                      f"candidate {candidate_ms[-1]:.4f} ms, "
                      f"(min {report.candidate_timing.min_ms:.4f}, iqr {report.candidate_timing.iqr_ms:.4f}), "
                      f"reference {reference_ms[-1]:.4f} ms (min {report.reference_timing.min_ms:.4f}, iqr "
                      f"{report.reference_timing.iqr_ms:.4f}; on the device {_ms(device_ms[-1])}), fastest iteration {fastest_ms[-1]:.4f} ms, "
                      f"reference sync overhead {overhead_ms[-1]:.4f} ms ({report.wall_s:.0f} s, "
                      f"ended {time.strftime('%H:%M:%S')})", flush=True)
                roofline = f"{report.roofline_fraction:.0%} of the roofline; " if report.roofline_fraction else ""
                print(f"   {roofline}clock: {clock_line(report)}", flush=True)
                print(f"   machine: {line(machine[-1])}", flush=True)
            for (warm_up, precision), (candidate_ms, reference_ms, fastest_ms, overhead_ms, speedups, intervals, machine,
                                       device_ms) in jobs.items():
                if len(candidate_ms) != args.repeats:
                    continue
                spread = max(speedups) / min(speedups)
                goal = 1.03 if min(candidate_ms) > 1.0 else 1.10
                rows.append([problem.name, _setting(warm_up, precision), args.repeats, min(speedups), max(speedups), spread, goal,
                             "yes" if spread <= goal else "no",
                             max(candidate_ms) / min(candidate_ms), max(reference_ms) / min(reference_ms), _spread(device_ms),
                             min(candidate_ms), min(reference_ms), f"{min(overhead_ms):.4f}-{max(overhead_ms):.4f}"])
                records.append({"problem": problem.name, "warm_up_ms": warm_up, "timing_precision": precision, "speedups": speedups,
                                "intervals": intervals,
                                "candidate_ms": candidate_ms, "reference_ms": reference_ms, "reference_device_ms": device_ms,
                                "machine": machine, "speedup_max_over_min": spread, "goal": goal})
    print_table(f"timing stability over {args.repeats} separate jobs, world {args.world}, {args.device}",
                ["problem", "setting", "jobs", "speedup min", "speedup max", "speedup max/min", "goal", "met", "cand max/min",
                 "ref max/min", "ref device max/min", "cand min ms", "ref min ms", "ref sync overhead ms"], rows)
    if args.json:
        args.json.write_text(json.dumps(records, indent=2))
    return 0


def _setting(warm_up: float | None, precision: float | None) -> str:
    words = ([] if warm_up is None else [f"warm-up {warm_up:g} ms"]) + ([] if precision is None else [f"precision {precision:g}"])
    return ", ".join(words) or "default"


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f} ms"


def _spread(values: list[float | None]) -> float | str:
    """max/min of the jobs' reference device times: how much of the reference's spread is the device's."""
    return "-" if not values or None in values else max(values) / min(values)


if __name__ == "__main__":
    raise SystemExit(main())
