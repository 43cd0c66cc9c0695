"""``kloop rejudge DIR``: every saved solution of a batch judged again by the current harness,
with the harness orders its episode had; what changed is listed, and the re-scored batch is
written to ``DIR/rejudge/`` (results.jsonl, summary.json, reports/) so ``kloop report DIR
DIR/rejudge`` sets old and new scores side by side. The run folders are not touched."""

from __future__ import annotations

import json
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog
import yaml

from agent.batch.config import parse_config
from agent.batch.episodes import EpisodeResult, StepPoint
from agent.batch.store import RESULTS, load_results
from agent.errors import UserError
from agent.intervals import overlaps
from sandbox.atomic_file import atomic_write

log = structlog.get_logger(__name__)


@dataclass
class Change:
    episode: str
    step: int
    old_status: str
    new_status: str
    old_speedup: float | None
    new_speedup: float | None
    why: str


@dataclass
class RejudgeOutcome:
    folder: Path
    evaluated: int = 0
    changes: list[Change] = field(default_factory=list)
    results: list[EpisodeResult] = field(default_factory=list)


def speedup_changed(old: dict[str, Any], new: Any) -> str | None:
    """Why a step's verdict differs, or None: a status change, or a speedup whose timing
    interval no longer overlaps the old one (a change inside the noise is not one)."""
    if old.get("status") != new.status:
        return "status"
    if old.get("speedup") is None or new.speedup is None:
        return None if old.get("speedup") == new.speedup else "timed"
    before = old.get("speedup_ci") or [old["speedup"]] * 2
    after = new.speedup_ci or [new.speedup] * 2
    return None if overlaps(before, after) else "speedup"


def _episode_steps(run: Path, result: EpisodeResult, best_only: bool) -> list[int]:
    steps = sorted(int(p.parent.name) for p in run.glob("steps/*/solution.py") if p.parent.name.isdigit())
    if best_only:
        chosen = result.best_step if result.best_step is not None else (steps[-1] if steps else None)
        return [chosen] if chosen is not None else []
    return steps


def rejudge_episode(folder: Path, out: Path, result: EpisodeResult, best_only: bool,
                    gpus: tuple[str, ...]) -> tuple[EpisodeResult, list[Change], int]:
    from agent.run_config import SandboxSettings
    from agent.session import EvaluationSession
    from sandbox.harness.config import HarnessConfig

    run = folder / result.run_dir
    saved = json.loads((run / "config.json").read_text())
    harness = HarnessConfig.model_validate(saved["harness"])
    sandbox = SandboxSettings.model_validate(saved.get("sandbox") or {})
    if gpus:
        sandbox = sandbox.model_copy(update={"gpus": ",".join(gpus)})
    changes, new_points = [], {p.step: p for p in result.steps}
    reports = {}
    with EvaluationSession(harness, sandbox, warm=not best_only) as session:
        for step in _episode_steps(run, result, best_only):
            source = (run / "steps" / f"{step:03d}" / "solution.py").read_text()
            report = session.evaluate(source, step)
            reports[step] = report
            atomic_write(out / "reports" / result.id / f"{step:03d}.json", report.model_dump_json(indent=2))
            old_path = run / "steps" / f"{step:03d}" / "report.json"
            old = json.loads(old_path.read_text()) if old_path.exists() else {}
            why = speedup_changed(old, report)
            if why:
                changes.append(Change(result.id, step, old.get("status", "?"), report.status, old.get("speedup"), report.speedup, why))
            new_points[step] = StepPoint(step=step, status=report.status, speedup=report.speedup)
    correct = {s: r for s, r in reports.items() if r.correct}
    best = max(correct, key=lambda s: correct[s].speedup or 0.0, default=None)
    update: dict[str, Any] = {"steps": [new_points[s] for s in sorted(new_points)],
                              "run_dir": os.path.relpath(run, out)}
    if best is not None:
        update.update(outcome="correct", correct=True, best_step=best, speedup=correct[best].speedup,
                      speedup_ci=correct[best].speedup_ci, failure_class=None, best_status=None)
    elif reports:
        last = reports[max(reports)].status
        update.update(outcome="failed", correct=False, best_step=None, speedup=None, speedup_ci=None, failure_class=last, best_status=last)
    return result.model_copy(update=update), changes, len(reports)


def rejudge(folder: Path, workers: int = 1, best_only: bool = False, on_episode=None) -> RejudgeOutcome:
    from agent.batch.executor_local import batch_gpus
    from sandbox.gpu_pool import GpuPool
    from sandbox.harness.config import gpus_needed

    folder = Path(folder)
    config_path = folder / "config.yaml"
    if not config_path.exists():
        raise UserError(f"{folder} is not a batch folder (no config.yaml)")
    config = parse_config(yaml.safe_load(config_path.read_text()), str(config_path))
    out = folder / "rejudge"
    out.mkdir(exist_ok=True)
    outcome = RejudgeOutcome(folder=folder)
    results = sorted(load_results(folder), key=lambda r: r.id)
    ids = batch_gpus(config)
    pool = GpuPool(ids) if ids else None
    needed = gpus_needed(config.device, config.world)

    def one(result: EpisodeResult) -> tuple[EpisodeResult, list[Change], int]:
        if not result.scored or not result.run_dir:
            return result.model_copy(update={"run_dir": None}), [], 0
        if pool is None:
            return rejudge_episode(folder, out, result, best_only, ())
        with pool.lease(needed) as lease:
            return rejudge_episode(folder, out, result, best_only, lease.device_ids)

    with ThreadPoolExecutor(max(1, workers)) as threads:
        for new, changes, evaluated in threads.map(one, results):
            outcome.results.append(new)
            outcome.changes += changes
            outcome.evaluated += evaluated
            if on_episode:
                on_episode(new, changes)
    atomic_write(out / RESULTS, "".join(r.model_dump_json() + "\n" for r in outcome.results))
    atomic_write(out / "config.yaml", config_path.read_text())
    from agent.batch.report import write_summary

    write_summary(out)
    return outcome
