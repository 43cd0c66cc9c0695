"""Batch test helpers: hand-made episode results, an independent (naive) pass@k / fast_p to check
the metrics against, batch folders made from results, and a batch run as a subprocess."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

from agent.batch.episodes import EpisodeResult, StepPoint

ROOT = Path(__file__).resolve().parents[2]


def result(model: str, problem: str, sample: int, outcome: str = "failed", speedup: float | None = None,
           ci: list[float] | None = None, steps: list[tuple[str, float | None]] = (), category: str = "collective",
           cost: float | None = 0.0, failure: str | None = None) -> EpisodeResult:
    points = [StepPoint(step=i + 1, status=status, speedup=s) for i, (status, s) in enumerate(steps)]
    correct = outcome == "correct"
    best = next((p.step for p in points if p.status == "correct" and p.speedup == speedup), None) if correct else None
    return EpisodeResult(id=f"{model}__{problem}__s{sample}", model=model, spec=model if ":" in model else f"scripted:{model}",
                         problem=problem, category=category, sample=sample, outcome=outcome, correct=correct, speedup=speedup,
                         speedup_ci=ci, best_step=best, steps_used=len(points), cost_usd=cost, wall_s=1.0, steps=points,
                         failure_class=failure or (None if correct else ("infra:harness" if outcome == "infra" else "wrong")),
                         run_dir=f"runs/{model}__{problem}__s{sample}/try1")


def hand_fixture() -> list[EpisodeResult]:
    """Model ``a``: p1 (collective) has 3 samples, 2 correct (1.5x with interval 1.4-1.6, 0.9x);
    p2 (tp) has 3 scored samples, 1 correct (2.5x, 2.2-2.8), and one try lost to infrastructure.
    Model ``b``: one sample of each problem, p1 correct at 1.2x, p2 wrong."""
    return [
        result("a", "p1", 0, "correct", 1.5, [1.4, 1.6], [("wrong", None), ("correct", 1.5)], cost=0.10),
        result("a", "p1", 1, "correct", 0.9, None, [("correct", 0.9)], cost=0.05),
        result("a", "p1", 2, "failed", steps=[("wrong", None), ("wrong", None)], cost=0.10),
        result("a", "p2", 0, "failed", steps=[("build_failed", None), ("wrong", None)], category="tp", cost=0.10),
        result("a", "p2", 1, "failed", steps=[("wrong", None)], category="tp", cost=0.05),
        result("a", "p2", 2, "correct", 2.5, [2.2, 2.8], [("wrong", None), ("correct", 2.5)], category="tp", cost=0.10),
        result("a", "p2", 3, "infra", steps=[("crashed", None)], category="tp", cost=0.01),
        result("b", "p1", 0, "correct", 1.2, [1.1, 1.3], [("correct", 1.2)], cost=None),
        result("b", "p2", 0, "failed", steps=[("wrong", None)], category="tp", cost=None),
    ]


def naive_pass_at_k(n: int, c: int, k: int) -> float:
    """1 - C(n-c, k) / C(n, k), straight from the definition."""
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def naive_scores(records: list[dict], model: str, samples: int) -> dict[str, float]:
    """pass@k, fast_p and the geometric mean from results.jsonl records, computed the plain way."""
    groups: dict[str, list[dict]] = defaultdict(list)
    for r in records:
        if r["model"] == model and r["outcome"] in ("correct", "failed"):
            groups[r["problem"]].append(r)
    scores = {}
    for k in range(1, samples + 1):
        values = [naive_pass_at_k(len(g), sum(r["correct"] for r in g), k) for g in groups.values() if len(g) >= k]
        scores[f"pass@{k}"] = sum(values) / len(values)
    for p in (0, 1, 1.5, 2):
        fast = [sum(r["correct"] and (p == 0 or (r["speedup"] is not None and r["speedup"] > p)) for r in g) / len(g)
                for g in groups.values()]
        scores[f"fast_{p:g}"] = sum(fast) / len(fast)
    logs = [math.log(r["speedup"]) for g in groups.values() for r in g if r["correct"] and r["speedup"]]
    scores["geomean"] = math.exp(sum(logs) / len(logs)) if logs else None
    return scores


def write_batch_folder(folder: Path, results: list[EpisodeResult], samples: int = 3) -> Path:
    """A batch folder holding ``results`` (and their run folders, with a trajectory each)."""
    (folder / "episodes").mkdir(parents=True, exist_ok=True)
    (folder / "config.yaml").write_text(f"models: [scripted:demo]\nproblems: [all_reduce]\nsamples: {samples}\n")
    with (folder / "results.jsonl").open("w") as lines:
        for r in results:
            (folder / "episodes" / f"{r.id}.json").write_text(r.model_dump_json())
            lines.write(r.model_dump_json() + "\n")
            run = folder / r.run_dir
            run.mkdir(parents=True, exist_ok=True)
            (run / "trajectory.traj.json").write_text(json.dumps({"info": {}, "messages": [], "trajectory_format": "mini-swe-agent-1.1"}))
    return folder


def kloop(*args: str, timeout: float = 900, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "agent", *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT,
                          env={**os.environ, "COLUMNS": "160", **(env or {})})


def start_batch(config: Path, out: Path, log: Path, *extra: str) -> subprocess.Popen:
    """``kloop batch`` in its own session (so a kill -9 reaches it and nothing else of ours)."""
    return subprocess.Popen([sys.executable, "-m", "agent", "batch", str(config), "--out", str(out), *extra], cwd=ROOT,
                            stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True,
                            env={**os.environ, "COLUMNS": "160"})


def wait_for_lines(path: Path, count: int, process: subprocess.Popen, timeout_s: float) -> int:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        lines = len(path.read_text().splitlines()) if path.exists() else 0
        if lines >= count:
            return lines
        if process.poll() is not None:
            return lines
        time.sleep(0.2)
    raise TimeoutError(f"{path} did not reach {count} lines in {timeout_s} s")


def read_records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]
