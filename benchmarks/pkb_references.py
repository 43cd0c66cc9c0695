"""Every ParallelKernelBench reference judged by kloop as if it were a candidate: it must come out
``correct``. What does not is classified: cannot run here (triton missing, a gloo limit, CUDA
only), too slow (a stage timed out), too big (out of memory), or a harness bug (everything else:
the reference judged against itself must pass).

    python benchmarks/pkb_references.py --pkb-root .pkb --device cuda --world 1 --out /tmp/pkb_refs --resume
    python benchmarks/pkb_references.py --pkb-root .pkb --device cpu --world 1 --skip 60 68 --timeout-s 120 --out /tmp/pkb_refs_cpu

One line per problem as it goes, a table at the end; ``--out`` keeps ``results.jsonl`` (one JSON
object a problem, appended as it goes: ``--resume`` skips the problems already there) and the
failing reports' logs.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from paths import ROOT
from table import print_table

CLASSES = ("correct", "cannot run here", "too slow", "too big", "harness bug")
TOO_BIG = ("out of memory", "OutOfMemoryError", "MemoryError", "can't allocate memory", "DefaultCPUAllocator", "Cannot allocate memory",
           "killed by signal 9", "SIGKILL")
CANNOT_RUN = (("No module named 'triton'", "needs triton"), ("Torch not compiled with CUDA", "CUDA-only"),
              ("No CUDA GPUs are available", "CUDA-only"), ("Found no NVIDIA driver", "CUDA-only"),
              ("Cannot access accelerator device", "CUDA-only"), ("no CUDA-capable device", "CUDA-only"),
              ("ProcessGroupGloo", "a gloo limit"), ("gloo", "a gloo limit"))


def classify(status: str, message: str, logs: str) -> tuple[str, str]:
    """(class, why) of one reference's report."""
    if status == "correct":
        return "correct", ""
    text = f"{message}\n{logs}"
    if status == "timeout":
        return "too slow", message[:160]
    if any(needle in text for needle in TOO_BIG):
        return "too big", message[:160]
    if "cannot run here" in message or status in ("crashed", "build_failed"):
        for needle, why in CANNOT_RUN:
            if needle in text:
                return "cannot run here", why
    return "harness bug", f"{status}: {message[:200]}"


def evaluate(problem, source: str, args) -> tuple[dict, float]:
    from common import evaluate as judge

    from sandbox.harness.config import StageTimeouts

    stage = args.timeout_s
    started = time.monotonic()
    report = judge(source, filename="reference_as_candidate.py", problem=problem.name, problem_ref=problem.ref, world=args.world,
                   device=args.device, trials=args.trials, allow_nccl=True, timed=args.timed, profile=False, size=args.size,
                   timeouts=StageTimeouts(startup_s=max(stage, 60.0), build_s=stage, correctness_s=stage, performance_s=stage,
                                          profile_s=stage))
    return json.loads(report.model_dump_json()), time.monotonic() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pkb-root", type=Path, default=Path(os.environ.get("KLOOP_PKB_ROOT") or ROOT / ".pkb"))
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda", "emulate"])
    parser.add_argument("--world", type=int, default=1)
    parser.add_argument("--trials", type=int, default=2)
    parser.add_argument("--size", default=None)
    parser.add_argument("--timed", action="store_true", help="also time each reference against itself (default: correctness only)")
    parser.add_argument("--problems", nargs="*", help="ids or stems (default: every reference in the checkout)")
    parser.add_argument("--skip", nargs="*", default=[], help="ids or stems to leave out")
    parser.add_argument("--timeout-s", type=float, default=180.0, help="per stage of each evaluation")
    parser.add_argument("--out", type=Path, help="folder for results.jsonl and the logs")
    parser.add_argument("--resume", action="store_true", help="skip the problems already in OUT/results.jsonl")
    args = parser.parse_args(argv)

    import common  # noqa: F401 - quiets the project's logs

    from problems.pkb import checkout_root, load_pkb_problem, problem_stems, resolve_stem

    root = checkout_root(args.pkb_root)
    stems = [resolve_stem(root, p) for p in args.problems] if args.problems else problem_stems(root)
    skipped = {resolve_stem(root, p) for p in args.skip}
    done: dict[str, dict] = {}
    results_path = None
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "logs").mkdir(exist_ok=True)
        results_path = args.out / "results.jsonl"
        if args.resume and results_path.exists():
            for line in results_path.read_text().splitlines():
                try:
                    row = json.loads(line)
                    done[row["stem"]] = row
                except (ValueError, KeyError):
                    continue
    rows = []
    for stem in stems:
        if stem in skipped:
            row = {"stem": stem, "class": "skipped", "why": "--skip", "status": "-", "wall_s": None}
        elif stem in done:
            row = {**done[stem], "resumed": True}
        else:
            problem = load_pkb_problem(stem, root)
            try:
                report, wall = evaluate(problem, problem.reference_source, args)
            except Exception as error:  # noqa: BLE001 - a failure of the harness itself is a finding
                report, wall = {"status": "crashed", "message": f"{type(error).__name__}: {error}", "logs": []}, 0.0
            logs = "\n".join(f"--- {e.get('name')}\n{e.get('head', '')}{e.get('tail', '')}" for e in report.get("logs", []))
            verdict, why = classify(report["status"], report.get("message", ""), logs)
            row = {"stem": stem, "class": verdict, "why": why, "status": report["status"], "wall_s": round(wall, 1),
                   "message": report.get("message", "")[:500], "harness_s": report.get("wall_s"), "notes": report.get("notes", [])}
            if results_path is not None:
                with results_path.open("a") as handle:
                    handle.write(json.dumps(row) + "\n")
                if verdict != "correct":
                    (args.out / "logs" / f"{stem}.txt").write_text(f"{report['status']}: {report.get('message', '')}\n{logs}")
        rows.append(row)
        print(f"{stem}: {row['class']}{' (' + row['why'] + ')' if row.get('why') else ''} [{row['status']}, "
              f"{row['wall_s']} s]{' (resumed)' if row.get('resumed') else ''}", flush=True)
    print_table(f"ParallelKernelBench references judged by kloop: {args.device}, world {args.world}, {args.trials} trials",
                ["problem", "class", "status", "wall_s", "why"], [[r["stem"], r["class"], r["status"], r["wall_s"], r["why"][:90]]
                                                                   for r in rows])
    counts = {c: sum(r["class"] == c for r in rows) for c in (*CLASSES, "skipped")}
    print_table("summary", list(counts), [list(counts.values())])
    if args.out:
        (args.out / "summary.json").write_text(json.dumps({"device": args.device, "world": args.world, "counts": counts,
                                                           "rows": rows}, indent=2))
    return 0 if counts["harness bug"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
