"""The numbers a batch is judged by, each with a bootstrap confidence interval.

- ``pass@k``: the unbiased estimator of Chen et al. (Codex; KernelBench uses it): per problem
  with ``n`` samples of which ``c`` are correct, ``1 - C(n-c, k) / C(n, k)``, averaged over the
  problems that have at least ``k`` samples.
- ``fast_p``: KernelBench's share of answers that are correct *and* more than ``p`` times as
  fast as the reference (``fast_0`` is the share correct, timed or not), per problem over its
  samples, then averaged over problems; ``fast_1@k`` is pass@k with "correct and faster" as
  success (ParallelKernelBench's fast1@3 is ``fast_1@3``). ``fast_p_sure`` counts only answers
  whose timing interval (EvalReport.speedup_ci) lies wholly above ``p``: the reference against
  itself scores about 50% fast_1 by noise, and 0% fast_1_sure.
- the geometric-mean speedup over correct, timed episodes (in log space).
- CIs: a two-stage bootstrap (problems with replacement, then each problem's samples), the
  2.5th and 97.5th percentiles, seeded (the same results give the same intervals).

Only scored episodes count (outcome ``correct`` or ``failed``); infrastructure failures and
skipped episodes are counted beside the scores, never in them. Rankings say "tied" when
intervals overlap instead of ordering noise.
"""

from __future__ import annotations

import math
import random
from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import Any

from agent.batch.episodes import EpisodeResult
from agent.intervals import overlaps

FAST_P = (0.0, 1.0, 1.5, 2.0)
BOOTSTRAP = 1000
Point = tuple[bool, float | None, float | None]  # (correct, speedup, the speedup interval's low end)
Groups = list[list[Point]]


def pass_at_k(n: int, c: int, k: int) -> float:
    """Probability that at least one of ``k`` samples drawn without replacement from ``n`` (``c``
    of them correct) is correct: ``1 - prod_{i=n-c+1..n} (1 - k/i)``."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n (n={n}, c={c}, k={k})")
    if n - c < k:
        return 1.0
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


def is_fast(point: Point, p: float, sure: bool = False) -> bool:
    """Correct and more than ``p`` times faster; ``sure``: the whole timing interval above ``p``
    (a speedup within noise of ``p`` does not count)."""
    correct, speedup, low = point
    if sure and p > 0:
        speedup = low if low is not None else speedup
    return correct and (p == 0 or (speedup is not None and speedup > p))


def _mean(values: Iterable[float]) -> float | None:
    values = list(values)
    return sum(values) / len(values) if values else None


def fast_p(groups: Groups, p: float, sure: bool = False) -> float | None:
    return _mean(sum(is_fast(x, p, sure) for x in g) / len(g) for g in groups if g)


def success_at_k(groups: Groups, k: int, p: float | None = None) -> float | None:
    """pass@k (``p`` None) or fast_p@k, over the problems with at least ``k`` samples."""
    return _mean(pass_at_k(len(g), sum(x[0] if p is None else is_fast(x, p) for x in g), k) for g in groups if len(g) >= k)


def geomean_speedup(groups: Groups) -> float | None:
    logs = [math.log(s) for g in groups for correct, s, _ in g if correct and s is not None and s > 0]
    return math.exp(sum(logs) / len(logs)) if logs else None


def core_metrics(groups: Groups, max_k: int) -> dict[str, float | None]:
    values: dict[str, float | None] = {f"fast_{p:g}": fast_p(groups, p) for p in FAST_P}
    values["correct"] = values["fast_0"]
    values.update({f"fast_{p:g}_sure": fast_p(groups, p, sure=True) for p in FAST_P if p > 0})
    for k in range(1, max_k + 1):
        values[f"pass@{k}"] = success_at_k(groups, k)
        values[f"fast_1@{k}"] = success_at_k(groups, k, 1.0)
    values["geomean_speedup"] = geomean_speedup(groups)
    return values


def percentile(sorted_values: list[float], q: float) -> float:
    position = (len(sorted_values) - 1) * q
    low, high = math.floor(position), math.ceil(position)
    return sorted_values[low] + (sorted_values[high] - sorted_values[low]) * (position - low)


def bootstrap(groups: Groups, metrics: Callable[[Groups], dict[str, float | None]], resamples: int = BOOTSTRAP,
              seed: int = 0) -> dict[str, list[float] | None]:
    """95% intervals of every metric: problems resampled with replacement, then each problem's samples."""
    rng = random.Random(seed)
    draws: dict[str, list[float]] = defaultdict(list)
    groups = [g for g in groups if g]
    if not groups:
        return {}
    for _ in range(resamples):
        picked = [rng.choice(groups) for _ in groups]
        sample = [[rng.choice(g) for _ in g] for g in picked]
        for name, value in metrics(sample).items():
            if value is not None:
                draws[name].append(value)
    return {name: [round(percentile(sorted(v), 0.025), 6), round(percentile(sorted(v), 0.975), 6)] for name, v in draws.items()}


def with_ci(values: dict[str, float | None], cis: dict[str, list[float] | None]) -> dict[str, dict[str, Any]]:
    return {name: {"value": None if value is None else round(value, 9), "ci": cis.get(name)} for name, value in values.items()}


def by_problem(results: list[EpisodeResult]) -> dict[str, list[EpisodeResult]]:
    grouped: dict[str, list[EpisodeResult]] = defaultdict(list)
    for result in results:
        grouped[result.problem].append(result)
    return dict(grouped)


def points(results: list[EpisodeResult]) -> Groups:
    return [[(r.correct, r.speedup, r.speedup_ci[0] if r.speedup_ci else None) for r in group if r.scored]
            for group in by_problem(results).values()]


def state_after(result: EpisodeResult, step: int) -> Point:
    """(correct so far, best speedup so far, None) after ``step`` model calls of the episode."""
    correct = [p for p in result.steps if p.step <= step and p.status == "correct"]
    timed = [p.speedup for p in correct if p.speedup is not None]
    return bool(correct), max(timed) if timed else None, None


def per_step(results: list[EpisodeResult], max_step: int) -> list[dict[str, Any]]:
    """After each step ``s``: the share of episodes (problem-weighted) with a correct solution,
    and with one faster than the reference."""
    scored = [r for r in results if r.scored]
    curve = []
    for step in range(1, max_step + 1):
        groups = [[state_after(r, step) for r in group] for group in by_problem(scored).values()]
        curve.append({"step": step, "correct": _round(fast_p(groups, 0.0)), "fast_1": _round(fast_p(groups, 1.0))})
    return curve


def fast_p_curve(groups: Groups, top: float) -> list[list[float]]:
    grid = [round(top * i / 60, 4) for i in range(61)]
    return [[p, round(fast_p(groups, p) or 0.0, 6)] for p in grid]


def spend(results: list[EpisodeResult]) -> dict[str, Any]:
    """Everything spent, infrastructure failures' tries included (the money is gone either way)."""
    return {"cost_usd": round(sum(r.cost_usd or 0.0 for r in results), 6),
            "episodes_without_price": sum(1 for r in results if r.cost_usd is None and r.steps_used),
            "input_tokens": sum(r.input_tokens for r in results), "output_tokens": sum(r.output_tokens for r in results),
            "model_calls": sum(r.steps_used for r in results), "wall_s": round(sum(r.wall_s for r in results), 1)}


def model_summary(results: list[EpisodeResult], samples: int, max_step: int, resamples: int, seed: int) -> dict[str, Any]:
    groups = points(results)
    max_k = max((len(g) for g in groups), default=0) or samples
    values = core_metrics(groups, max_k)
    cis = bootstrap(groups, lambda g: core_metrics(g, max_k), resamples, seed)
    metrics = with_ci(values, cis)
    categories: dict[str, list[EpisodeResult]] = defaultdict(list)
    for result in results:
        categories[result.category].append(result)
    per_category = {}
    for category, members in sorted(categories.items()):
        cat_groups = points(members)
        core = lambda g: {"correct": fast_p(g, 0.0), "fast_1": fast_p(g, 1.0), "geomean_speedup": geomean_speedup(g)}  # noqa: E731
        per_category[category] = {"episodes": sum(len(g) for g in cat_groups), "problems": len([g for g in cat_groups if g]),
                                  **with_ci(core(cat_groups), bootstrap(cat_groups, core, resamples, seed))}
    speedups = [s for g in groups for c, s, _ in g if c and s is not None]
    return {
        "spec": results[0].spec if results else "",
        "episodes": len(results), "scored": sum(len(g) for g in groups),
        "correct": sum(1 for g in groups for c, _, _ in g if c),
        "infra_failures": sum(1 for r in results if r.outcome == "infra"),
        "infra_by_class": dict(sorted(_count(r.failure_class for r in results if r.outcome == "infra").items())),
        "infra_retries": sum(r.infra_attempts for r in results),
        "skipped": sum(1 for r in results if r.outcome == "skipped"),
        "untimed_correct": sum(1 for g in groups for c, s, _ in g if c and s is None),
        "problems": len([g for g in groups if g]),
        "correct_rate": metrics["correct"],
        "pass_at_k": {str(k): metrics[f"pass@{k}"] for k in range(1, max_k + 1)},
        "fast_p": {f"{p:g}": metrics[f"fast_{p:g}"] for p in FAST_P},
        "fast_p_sure": {f"{p:g}": metrics[f"fast_{p:g}_sure"] for p in FAST_P if p > 0},
        "fast_1_at_k": {str(k): metrics[f"fast_1@{k}"] for k in range(1, max_k + 1)},
        "geomean_speedup": {**metrics["geomean_speedup"], "episodes": len(speedups)},
        "fast_p_curve": fast_p_curve(groups, max(2.5, max(speedups, default=0.0) * 1.05)),
        "per_category": per_category,
        "per_step": per_step(results, max_step),
        "spend": spend(results),
    }


def _count(items: Iterable[Any]) -> dict[Any, int]:
    counts: dict[Any, int] = defaultdict(int)
    for item in items:
        counts[item] += 1
    return dict(counts)


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 9)


def interval(metric: dict[str, Any]) -> list[float] | None:
    if metric.get("value") is None:
        return None
    return metric.get("ci") or [metric["value"], metric["value"]]


def leaderboard(models: dict[str, dict[str, Any]], key: str = "1") -> list[dict[str, Any]]:
    """Models by fast_1 (then correct rate); ``rank`` is 1 + the number of models whose interval
    lies wholly above this one's, so models whose intervals overlap share a rank (``tied_with``)."""
    def score(label: str) -> tuple[float, float]:
        m = models[label]
        return (m["fast_p"][key]["value"] or 0.0, m["correct_rate"]["value"] or 0.0)

    order = sorted(models, key=score, reverse=True)
    board = []
    for label in order:
        mine = interval(models[label]["fast_p"][key])
        better = [o for o in order if o != label and mine is not None and (theirs := interval(models[o]["fast_p"][key])) is not None
                  and theirs[0] > mine[1]]
        tied = [o for o in order if o != label and overlaps(mine, interval(models[o]["fast_p"][key]))]
        board.append({"model": label, "rank": 1 + len(better), "tied_with": tied})
    return board


def problem_comparisons(results: list[EpisodeResult]) -> dict[str, dict[str, Any]]:
    """Per problem, each model's best correct speedup (with its timing interval), the leader,
    and which models it cannot be told apart from (their intervals overlap the leader's)."""
    table: dict[str, dict[str, Any]] = {}
    for problem, members in sorted(by_problem(results).items()):
        entry: dict[str, Any] = {"category": members[0].category, "models": {}}
        for label in dict.fromkeys(r.model for r in members):
            mine = [r for r in members if r.model == label and r.scored]
            timed = [r for r in mine if r.correct and r.speedup is not None]
            best = max(timed, key=lambda r: r.speedup, default=None)
            entry["models"][label] = {"samples": len(mine), "correct": sum(r.correct for r in mine),
                                      "best_speedup": best.speedup if best else None,
                                      "best_speedup_ci": (best.speedup_ci or [best.speedup, best.speedup]) if best else None}
        timed_models = {m: v for m, v in entry["models"].items() if v["best_speedup"] is not None}
        if timed_models:
            leader = max(timed_models, key=lambda m: timed_models[m]["best_speedup"])
            entry["leader"] = leader
            entry["tied_with_leader"] = [m for m, v in timed_models.items() if m != leader
                                         and overlaps(v["best_speedup_ci"], timed_models[leader]["best_speedup_ci"])]
        table[problem] = entry
    return table


def summarize(results: list[EpisodeResult], samples: int | None = None, resamples: int = BOOTSTRAP, seed: int = 0) -> dict[str, Any]:
    """``summary.json``: per model (in first-seen order), the leaderboard, per-problem comparisons."""
    by_model: dict[str, list[EpisodeResult]] = defaultdict(list)
    for result in results:
        by_model[result.model].append(result)
    max_step = max((p.step for r in results for p in r.steps), default=1)
    samples = samples or max((r.sample + 1 for r in results), default=1)
    models = {label: model_summary(members, samples, max_step, resamples, seed) for label, members in by_model.items()}
    return {"episodes": len(results), "models": models, "leaderboard": leaderboard(models) if models else [],
            "problems": problem_comparisons(results), "fast_p_values": [f"{p:g}" for p in FAST_P],
            "bootstrap": {"resamples": resamples, "seed": seed, "unit": "problems, then samples within each"}}
