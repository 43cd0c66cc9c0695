"""Batch jobs: models x problems x samples, run as agent runs through the server's capacity.

The interface the service needs from a batch is small: ``check_config(dict) -> BatchConfig``
(422 on a bad config), ``run_batch(config, out, run_episode, control) -> summary`` writing
``out/results.jsonl`` (one line an episode, appended, so a batch re-run after a restart skips
finished episodes) and ``out/summary.json``, and ``leaderboard(summary)`` for the page.

This is the service's own small implementation of it. ``kloop batch`` (agent/batch, issue 15) is
built separately; once it is on main this module delegates to it (same config keys, same
results.jsonl and summary.json), and the batch view also embeds its report.html when present.
"""

from __future__ import annotations

import json
import math
import re
import threading
from collections import defaultdict
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from sandbox.harness.config import DeviceMode
from agent.batch.metrics import pass_at_k
from service.control import JobControl
from service.models import Budgets, RunRequest, ServiceRunMode

FAST_P = (0.0, 1.0, 1.5, 2.0)
MAX_EPISODES = 2000


class ModelEntry(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: str
    options: dict[str, Any] = Field(default_factory=dict)


class BatchConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    models: list[str | ModelEntry] = Field(min_length=1)
    problems: list[str] = Field(min_length=1, description="names, category:<cat>, or all")
    samples: int = Field(1, ge=1, le=50)
    steps: int = Field(5, ge=1, le=200)
    mode: ServiceRunMode = "loop"
    world: int = Field(2, ge=1, le=64)
    device: DeviceMode = "cpu"
    size: str | None = None
    trials: int = Field(5, ge=1, le=100)
    timed: bool | None = None
    allow_nccl: bool = False
    budgets: Budgets = Field(default_factory=Budgets)
    target_speedup: float | None = None
    examples: bool = True
    cheat_sheet: bool = True
    workers: int = Field(2, ge=1, le=16, description="episodes at once (each still waits for the server's capacity)")
    seed: int = 0
    sandbox: Any = Field(None, description="ignored: the server decides where candidates run")

    @field_validator("models")
    @classmethod
    def _entries(cls, value: list) -> list:
        entries = [ModelEntry(model=v) if isinstance(v, str) else v for v in value]
        names = [entry.model for entry in entries]
        if len(set(names)) != len(names):
            raise ValueError(f"a model is named twice: {', '.join(sorted({n for n in names if names.count(n) > 1}))}")
        return entries

    @staticmethod
    def episodes(config: BatchConfig) -> Iterator[Episode]:
        index = 0
        for entry in config.models:
            for problem in expand_problems(config.problems):
                for sample in range(config.samples):
                    request = RunRequest(problem=problem, model=entry.model, options=entry.options, mode=config.mode, steps=config.steps,
                                         budgets=config.budgets, target_speedup=config.target_speedup, world=config.world,
                                         device=config.device, size=config.size, trials=config.trials, timed=config.timed,
                                         allow_nccl=config.allow_nccl,
                                         examples=config.examples, cheat_sheet=config.cheat_sheet)
                    yield Episode(index, entry.model, problem, sample, request)
                    index += 1


@dataclass
class Episode:
    index: int
    model: str
    problem: str
    sample: int
    request: RunRequest

    @property
    def key(self) -> str:
        return f"{self.model}|{self.problem}|{self.sample}"

    @property
    def folder_name(self) -> str:
        return re.sub(r"[^A-Za-z0-9_.-]+", "-", f"{self.index:04d}_{self.problem}_{self.model}_s{self.sample}")[:120]


class BatchConfigError(ValueError):
    pass


def expand_problems(names: list[str]) -> list[str]:
    from problems import all_problems

    out: list[str] = []
    for name in names:
        if name == "all":
            out += [p.name for p in all_problems()]
        elif name.startswith("category:"):
            category = name.split(":", 1)[1]
            found = [p.name for p in all_problems() if p.spec.category == category]
            if not found:
                raise BatchConfigError(f"no problems in category {category!r}")
            out += found
        else:
            out.append(name)
    return list(dict.fromkeys(out))


def check_config(data: dict[str, Any]) -> BatchConfig:
    try:
        config = BatchConfig.model_validate(data)
        episodes = sum(1 for _ in BatchConfig.episodes(config))
    except ValidationError as error:
        raise BatchConfigError("; ".join(f"config.{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in error.errors())) from None
    if episodes > MAX_EPISODES:
        raise BatchConfigError(f"{episodes} episodes; a batch on this server has at most {MAX_EPISODES}")
    return config


def finished_episodes(results: Path) -> dict[str, dict[str, Any]]:
    lines: dict[str, dict[str, Any]] = {}
    if results.exists():
        for line in results.read_text().splitlines():
            try:
                record = json.loads(line)
                lines[record["key"]] = record
            except (ValueError, KeyError, TypeError):
                continue  # a line cut by a crash
    return lines


def run_batch(config: BatchConfig, out: Path, run_episode: Callable[[Episode, Path], dict[str, Any] | None],
              control: JobControl) -> dict[str, Any]:
    """Run every episode not in ``out/results.jsonl`` yet; returns (and writes) the summary."""
    out.mkdir(parents=True, exist_ok=True)
    results_path = out / "results.jsonl"
    done = finished_episodes(results_path)
    episodes = list(BatchConfig.episodes(config))
    todo = [e for e in episodes if e.key not in done]
    lock = threading.Lock()
    control.emit("batch_started", {"episodes": len(episodes), "done": len(done)})

    def one(episode: Episode) -> None:
        control.check()
        result = run_episode(episode, out / "episodes" / episode.folder_name) or {}
        best = result.get("best") or {}
        stats = result.get("model_stats") or {}
        record = {"key": episode.key, "model": episode.model, "problem": episode.problem, "sample": episode.sample,
                  "exit_status": result.get("exit_status"), "correct": bool(best), "speedup": best.get("speedup"),
                  "steps": stats.get("api_calls"), "tokens": (stats.get("input_tokens") or 0) + (stats.get("output_tokens") or 0),
                  "cost_usd": stats.get("instance_cost"), "wall_s": result.get("wall_s"),
                  "folder": f"episodes/{episode.folder_name}"}
        with lock:
            with results_path.open("a") as handle:
                handle.write(json.dumps(record) + "\n")
            done[episode.key] = record
            summary = summarize(config, list(done.values()), len(episodes))
        control.emit("episode", record)
        control.store.set_result(control.job.id, summary)

    with ThreadPoolExecutor(max_workers=config.workers, thread_name_prefix=f"batch-{control.job.id}") as pool:
        futures = [pool.submit(one, episode) for episode in todo]
        try:
            for future in futures:
                future.result()
        except BaseException:
            for future in futures:
                future.cancel()
            raise
    summary = summarize(config, list(done.values()), len(episodes))
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    return summary


def summarize(config: BatchConfig, records: list[dict[str, Any]], total: int) -> dict[str, Any]:
    by_model: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for record in records:
        by_model[record["model"]].append(record)
    models = {}
    for entry in config.models:
        rows = by_model.get(entry.model, [])
        per_problem: dict[str, list[bool]] = defaultdict(list)
        for row in rows:
            per_problem[row["problem"]].append(row["correct"])
        speedups = [row["speedup"] for row in rows if row["correct"] and row["speedup"]]
        costs = [row["cost_usd"] for row in rows if row["cost_usd"] is not None]
        models[entry.model] = {
            "episodes": len(rows), "correct": sum(row["correct"] for row in rows),
            "pass_at_k": {str(k): _mean([pass_at_k(len(v), sum(v), k) for v in per_problem.values() if len(v) >= k])
                          for k in range(1, config.samples + 1)},
            "fast_p": {str(p): _mean([row["correct"] and (row["speedup"] or 0.0) > p for row in rows]) for p in FAST_P},
            "geomean_speedup": math.exp(sum(map(math.log, speedups)) / len(speedups)) if speedups else None,
            "cost_usd": sum(costs) if costs else None,
            "tokens": sum(row["tokens"] or 0 for row in rows),
        }
    return {"episodes": total, "finished": len(records), "models": models}


def _mean(values: list) -> float | None:
    return sum(values) / len(values) if values else None


def leaderboard(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """Models best first: by pass@1, then fast_1, then geometric-mean speedup."""
    rows = [{"model": name, **stats} for name, stats in (summary.get("models") or {}).items()]
    return sorted(rows, key=lambda r: (-(r["pass_at_k"].get("1") or 0), -(r["fast_p"].get("1.0") or 0), -(r["geomean_speedup"] or 0)))
