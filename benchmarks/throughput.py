"""Evaluations a minute through the warm path: one long-lived harness (sandbox.evaluate.WarmEvaluator,
``python -m sandbox.harness.serve``) judging the same small world-1 problem again and again, a
fresh candidate rank group for each (started ahead, never reused), the reference's kept.

Goal on one H200: <= 1 s per evaluation and >= 40 evaluations a minute (the first evaluation,
which starts everything, is reported apart).

    python benchmarks/throughput.py --device cuda --count 40 --out /tmp/throughput
    python benchmarks/throughput.py --device cpu --count 5 --candidate tests/fixtures/candidates/all_reduce_fp32.py --allow-nccl
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from common import ROOT, HarnessConfig, LocalSandbox, print_table
from machine_watch import MachineWatch, line

GOAL_PER_MIN = 40.0
GOAL_PER_EVAL_S = 1.0
# each evaluation's timing, kept in throughput.json: what moves when one reads far from the others
TIMING_FIELDS = {"speedup", "speedup_ci", "reference_timing", "candidate_timing", "reference_alone_ms", "reference_alone_age_s",
                 "timing_check", "harness_breakdown_s"}


def speedup_summary(speedups: list[float | None]) -> str:
    """One candidate judged again and again: what one evaluation's speedup may read, and which
    evaluations (by index, the first 0) read more than 2x off the median."""
    read = [s for s in speedups if s]
    middle = statistics.median(read)
    far = [i for i, s in enumerate(speedups) if s and not middle / 2 <= s <= middle * 2]
    return (f"speedups: median {middle:.3f}, {min(read):.3f}-{max(read):.3f} over {len(read)} evaluations; {len(far)} off the "
            f"median by more than 2x{f' (evaluations {far})' if far else ''}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--problem", default="all_reduce")
    parser.add_argument("--pkb-root", type=Path, help="for pkb:N problems")
    parser.add_argument("--candidate", type=Path, default=ROOT / "tests/fixtures/candidates/all_reduce_symm.py")
    parser.add_argument("--device", default="cuda", choices=["cpu", "cuda", "emulate"])
    parser.add_argument("--world", type=int, default=1)
    parser.add_argument("--count", type=int, default=40, help="evaluations after the first")
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--size", default="small", help="problem size (the goal is stated for a small problem; "
                        "the default size moves 64 MB a call)")
    parser.add_argument("--timed", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--timing-precision", type=float, default=0.0,
                        help="time more calls until the speedup is this precise (the judge's cuda default is 0.03; an RL "
                             "loop that wants evaluations a minute asks for none: 0)")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--allow-nccl", action="store_true")
    parser.add_argument("--pool-depth", type=int, help="candidate groups started ahead (the harness's KLOOP_WARM_DEPTH; default: its own)")
    parser.add_argument("--keep-alone", type=int, help="evaluations one measure of the reference's time alone serves (the "
                        "harness's KLOOP_KEEP_ALONE; 1: measured in every one; default: its own)")
    parser.add_argument("--warm-up-ms", type=float, nargs="+", default=[None],
                        help="the L2 flush's warm-up before a timed call (HarnessConfig.warm_up_ms; default: the judge's own)")
    parser.add_argument("--warmup", type=int, nargs="+", default=[None],
                        help="untimed calls before each group's timed rounds (HarnessConfig.warmup; default: the judge's own)")
    parser.add_argument("--out", type=Path, help="folder for throughput.json")
    args = parser.parse_args(argv)
    # several values: the evaluations take the settings in turn (the i-th of each list, cycled), a row each, side by side
    settings = [(args.warm_up_ms[i % len(args.warm_up_ms)], args.warmup[i % len(args.warmup)])
                for i in range(max(len(args.warm_up_ms), len(args.warmup)))]

    from problems import find_problem
    from sandbox.evaluate import WarmEvaluator

    problem = find_problem(args.problem, args.pkb_root)
    base = HarnessConfig(problem=problem.name, problem_ref=problem.ref if args.problem.startswith("pkb:") else None,
                         world=args.world, device=args.device, trials=args.trials, timed=args.timed, profile=args.profile,
                         allow_nccl=args.allow_nccl, size=args.size, timing_precision=args.timing_precision)
    configs = [base.model_copy(update={k: v for k, v in (("warm_up_ms", warm_up_ms), ("warmup", warmup)) if v is not None})
               for warm_up_ms, warmup in settings]
    source = args.candidate.read_text()
    walls, statuses, harness, timings, machine = [], [], [], [], []
    with tempfile.TemporaryDirectory(prefix="kloop-throughput-cache-") as cache:
        env = {"KLOOP_CACHE_DIR": cache, **({"KLOOP_WARM_DEPTH": str(args.pool_depth)} if args.pool_depth else {}),
               **({"KLOOP_KEEP_ALONE": str(args.keep_alone)} if args.keep_alone else {})}
        with LocalSandbox(env=env) as box, WarmEvaluator(box) as warm, MachineWatch() as watch:
            for index in range(args.count + 1):
                started = time.monotonic()
                config = configs[max(index - 1, 0) % len(configs)]
                report = warm.evaluate(source, config)
                walls.append(time.monotonic() - started)
                machine.append(watch.window(started, started + walls[-1]))
                statuses.append(report.status)
                harness.append(report.stage_wall_s)
                timings.append(report.model_dump(include=TIMING_FIELDS, mode="json"))
                label = ("first" if index == 0 else f"{index}/{args.count}") + (f" ({_setting(config)})" if len(configs) > 1 else "")
                print(f"evaluation {label}: {report.status} in {walls[-1]:.2f} s (stages {report.stage_wall_s})", flush=True)
                print(f"   where: {dict(list(report.harness_breakdown_s.items())[:6])}", flush=True)
                print(f"   machine: {line(machine[-1])}", flush=True)
                if report.reference_timing and report.reference_alone_ms:
                    slowed = any("slower beside the candidate" in note for note in report.notes)
                    ratio = report.reference_timing.median_ms / report.reference_alone_ms
                    age = "" if report.reference_alone_age_s is None else f" (alone measured {report.reference_alone_age_s:.1f} s before)"
                    print(f"   speedup {report.speedup}, reference beside/alone {ratio:.3f}{age}"
                          f"{', taken against alone' if slowed else ''}", flush=True)
                if report.status != "correct":
                    print(f"   {report.message[:300]}", flush=True)
    rows = [["first (starts everything)", 1, round(walls[0], 3), round(walls[0], 3), round(walls[0], 3), None, None, None]]
    for number, config in enumerate(configs):
        chosen = [i for i in range(1, len(walls)) if (i - 1) % len(configs) == number]
        if not chosen:
            continue
        warm_walls, speedups = [walls[i] for i in chosen], [timings[i]["speedup"] for i in chosen if timings[i]["speedup"]]
        total = sum(warm_walls)
        rows.append(["warm" + (f", {_setting(config)}" if len(configs) > 1 else ""), len(warm_walls),
                     round(statistics.median(warm_walls), 3), round(max(warm_walls), 3), round(total, 2),
                     round(60.0 * len(warm_walls) / total, 1), round(statistics.median(speedups), 3) if speedups else None,
                     round(max(speedups) / min(speedups), 3) if speedups else None])
    options = "".join([f", timed (precision {args.timing_precision:g})" if args.timed else "", ", profiled" if args.profile else "",
                       f", pool depth {args.pool_depth}" if args.pool_depth else "",
                       f", reference alone kept for {args.keep_alone}" if args.keep_alone else ""])
    print_table(f"throughput: {problem.name}, {args.candidate.name}, {args.device}, world {args.world}, {args.trials} trials{options} "
                f"(goal <= {GOAL_PER_EVAL_S} s each, >= {GOAL_PER_MIN:.0f}/min)",
                ["evaluations", "n", "median_s", "max_s", "total_s", "per_min", "speedup_median", "speedup_max/min"], rows)
    correct = sum(s == "correct" for s in statuses)
    print(f"{correct} of {len(statuses)} correct", flush=True)
    if any(t["speedup"] for t in timings):
        print(speedup_summary([t["speedup"] for t in timings]), flush=True)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "throughput.json").write_text(json.dumps({
            "problem": problem.name, "device": args.device, "world": args.world, "walls_s": walls, "statuses": statuses,
            "stages": harness, "timings": timings, "machine": machine, "per_min": rows[-1][5], "median_s": rows[-1][2],
            "settings": [_setting(c) for c in configs]}, indent=2))
    return 0 if correct == len(statuses) else 1


def _setting(config: HarnessConfig) -> str:
    return f"warm-up {config.warm_up_ms:g} ms, {config.warmup} warm-up calls"


if __name__ == "__main__":
    sys.exit(main())
