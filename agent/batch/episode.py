"""One episode of a batch: a model on a problem, through the agent loop's public entry point
(``agent.episode.Episode``), judged in its own sandbox, summed up as an :class:`EpisodeResult`.

Failures are told apart here. The model's (no correct solution within the budget: wrong,
build_failed, crashed, ... answers) are results. Infrastructure's are not: the provider still
failing after its retries (``ProviderFailed``), a sandbox that cannot start, a harness that
died without a report, an exception of ours; such a try is ``infra`` and the batch runs it
again (a bounded number of times) and keeps it out of the scores.

``RUNNERS`` maps each :class:`Mode` to the function that runs an episode in that mode.
"""

from __future__ import annotations

import threading
import time
import traceback
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog

from agent.batch.config import BatchConfig, Mode, ModelEntry
from agent.batch.episodes import Episode, EpisodeResult, StepPoint

if TYPE_CHECKING:
    from agent.run_config import RunConfig
    from problems.contract import Problem

log = structlog.get_logger(__name__)

HARNESS_FAILURE_PREFIXES = ("the harness ", "the warm harness ")


@dataclass
class EpisodeContext:
    """What a runner gets: the episode, the batch, where its try writes, which GPUs it holds
    and the gate its model calls pass (a provider's concurrency cap)."""

    episode: Episode
    config: BatchConfig
    folder: Path  # the batch folder
    attempt: int
    gpus: tuple[str, ...] = ()
    gate: AbstractContextManager | None = None
    infra_attempts: int = 0
    evaluate: Callable[[str, Any], Any] | None = None  # (source, HarnessConfig) -> EvalReport: the executor judges (e.g. the
    # service's evaluation capacity) instead of a sandbox session of the episode's own
    on_step: Callable[[dict[str, Any]], None] | None = None  # each step's record as it is made (the service's events)

    @property
    def run_dir(self) -> Path:
        return self.folder / "runs" / self.episode.id / f"try{self.attempt}"

    @property
    def entry(self) -> ModelEntry:
        return next(m for m in self.config.models if m.label == self.episode.model)

    def result(self, **fields: Any) -> EpisodeResult:
        e = self.episode
        return EpisodeResult(id=e.id, model=e.model, spec=e.spec, problem=e.problem, category=e.category, sample=e.sample,
                             attempt=self.attempt, infra_attempts=self.infra_attempts,
                             run_dir=str(self.run_dir.relative_to(self.folder)), **fields)


class GatedModel:
    """A model whose calls pass ``gate`` (a semaphore shared by every episode of one provider)."""

    def __init__(self, model: Any, gate: AbstractContextManager):
        self._model, self._gate = model, gate

    def __getattr__(self, name: str) -> Any:
        return getattr(self._model, name)

    def complete(self, *args: Any, **kwargs: Any) -> Any:
        with self._gate:
            return self._model.complete(*args, **kwargs)


class ProviderGates:
    """One semaphore per provider, sized by the config's ``concurrency`` caps (thread-safe)."""

    def __init__(self, config: BatchConfig):
        self.config = config
        self._gates: dict[str, threading.BoundedSemaphore] = {}
        self._lock = threading.Lock()

    def gate(self, provider: str) -> threading.BoundedSemaphore:
        with self._lock:
            if provider not in self._gates:
                self._gates[provider] = threading.BoundedSemaphore(self.config.cap(provider))
            return self._gates[provider]


def is_harness_failure(report: Any) -> bool:
    """A report the harness could not make (it died, timed out as a whole, or answered garbage):
    the judge failed, not the candidate."""
    return report.status in ("crashed", "timeout") and report.stage == "static" and report.message.startswith(HARNESS_FAILURE_PREFIXES)


@dataclass
class _Judged:
    """What the episode saw of its evaluations."""

    reports: dict[int, Any] = field(default_factory=dict)
    harness_failures: list[str] = field(default_factory=list)


def _prepare(ctx: EpisodeContext, mode: str) -> tuple[Problem, Any, RunConfig]:
    """The episode's problem, its model (behind the provider's gate) and its RunConfig in
    ``mode`` (harness on the episode's seed, sandbox on the GPUs it holds)."""
    from agent.budget import Budget
    from agent.providers import make_model
    from agent.run_config import RunConfig, harness_config
    from problems import find_problem

    config, episode, entry = ctx.config, ctx.episode, ctx.entry
    problem = find_problem(episode.selector, config.pkb_root)
    allow_nccl = config.allow_nccl if entry.allow_nccl is None else entry.allow_nccl
    harness = harness_config(problem, world=config.world, device=config.device, size=config.size, trials=config.trials,
                             timed=config.timed, timing_precision=config.timing_precision, allow_nccl=allow_nccl, seed=episode.seed)
    sandbox = config.sandbox.model_copy(update={"gpus": ",".join(ctx.gpus)}) if ctx.gpus else config.sandbox
    model = make_model(entry.spec, problem=problem, **entry.options)
    if ctx.gate is not None:
        model = GatedModel(model, ctx.gate)
    run_config = RunConfig(problem=episode.selector, model=entry.spec, model_options=entry.options, mode=mode,
                           budget=Budget(steps=1 if mode == "single" else config.steps, **config.budget),
                           target_speedup=config.target_speedup, harness=harness, sandbox=sandbox, out=ctx.run_dir.parent,
                           examples=config.examples, cheat_sheet=config.cheat_sheet, pkb_root=config.pkb_root)
    return problem, model, run_config


def run_agent_episode(ctx: EpisodeContext) -> EpisodeResult:
    """``loop`` and ``single``: one episode through the loop's public entry (``agent.episode.Episode``),
    judged in one sandbox for the whole episode (or by ``ctx.evaluate`` where the executor judges)."""
    from agent.episode import Episode
    from agent.session import EvaluationSession

    single = ctx.config.mode is Mode.single or ctx.entry.is_baseline  # a baseline's answer never changes: one step
    _, model, run_config = _prepare(ctx, "single" if single else "loop")
    episode, harness, sandbox = ctx.episode, run_config.harness, run_config.sandbox
    judged = _Judged()
    records: list[dict[str, Any]] = []

    def on_step(record: dict[str, Any]) -> None:
        records.append(record)
        if ctx.on_step is not None:
            ctx.on_step(record)

    run = Episode(run_config, model=model, folder=ctx.run_dir, info={"batch_episode": episode.id}, on_step=on_step)
    try:
        session = EvaluationSession(harness, sandbox, warm=not single) if ctx.evaluate is None else None
        with session or nullcontext():
            def evaluate(source: str, step: int):
                report = session.evaluate(source, step) if session is not None else ctx.evaluate(source, harness)
                judged.reports[step] = report
                if is_harness_failure(report):
                    judged.harness_failures.append(f"step {step}: {report.message}")
                return report

            run.evaluate = evaluate
            outcome = run.run()
    except BaseException as error:
        run.abort(error)  # the trajectory records why (a no-op when the loop already did)
        raise
    return summarize(ctx, outcome, records, judged)


def summarize(ctx: EpisodeContext, outcome: Any, records: list[dict[str, Any]], judged: _Judged) -> EpisodeResult:
    """The batch's record of an ``agent.episode.EpisodeResult`` (and the step records it went through)."""
    points = [StepPoint(step=r["step"], status=str(r.get("status")), speedup=r.get("speedup")) for r in records]
    fields: dict[str, Any] = dict(steps_used=outcome.steps, input_tokens=outcome.input_tokens, output_tokens=outcome.output_tokens,
                                  cost_usd=outcome.cost_usd, wall_s=outcome.wall_s, exit_status=outcome.exit_status, steps=points,
                                  message=outcome.message)
    if judged.harness_failures:
        return ctx.result(outcome="infra", failure_class="infra:harness", **{**fields, "message": "; ".join(judged.harness_failures)[:500]})
    if outcome.exit_status == "ProviderFailed":
        return ctx.result(outcome="infra", failure_class="infra:provider", **fields)
    if outcome.correct and outcome.best_step is not None:
        report = judged.reports.get(outcome.best_step)
        return ctx.result(outcome="correct", correct=True, speedup=outcome.best_speedup, best_step=outcome.best_step,
                          speedup_ci=getattr(report, "speedup_ci", None), **fields)
    evaluated = [p.status for p in points if p.step in judged.reports]
    last = evaluated[-1] if evaluated else (points[-1].status if points else "no_answer")
    if judged.reports:  # the judge's last word says more than the loop's exit summary
        fields["message"] = f"{fields['message']}; last verdict: {judged.reports[max(judged.reports)].message}"[:500]
    return ctx.result(outcome="failed", best_status=last, failure_class=last, **fields)


def run_bash_episode(ctx: EpisodeContext) -> EpisodeResult:
    """``bash``: the model at a shell in the sandbox (``agent.bash``); the episode's verdict is the
    full judge's on its submission. A baseline answers as in the loop (one step)."""
    from agent.bash.episode import run_episode as run_bash
    from agent.trajectory import start_run

    if ctx.entry.is_baseline:
        return run_agent_episode(ctx)
    problem, model, run_config = _prepare(ctx, "bash")
    trajectory = start_run(run_config, problem.name, ctx.run_dir, info={"batch_episode": ctx.episode.id})
    agent = run_bash(model, problem, run_config, trajectory)
    spend, verdict = agent.spend, agent.verdict
    points = [StepPoint(step=r["step"], status=str(r.get("status", "command")), speedup=r.get("speedup")) for r in agent.records]
    fields: dict[str, Any] = dict(steps_used=spend.steps, input_tokens=spend.input_tokens, output_tokens=spend.output_tokens,
                                  cost_usd=spend.known_cost_usd, wall_s=round(spend.wall_s, 1), exit_status=agent.exit_status,
                                  steps=points, message=(verdict.message if verdict is not None else agent.exit_status)[:500])
    if agent.exit_status == "ProviderFailed":
        return ctx.result(outcome="infra", failure_class="infra:provider", **fields)
    if verdict is not None and verdict.status == "correct":
        return ctx.result(outcome="correct", correct=True, speedup=verdict.speedup, speedup_ci=verdict.speedup_ci,
                          best_step=spend.steps, **fields)
    status = verdict.status if verdict is not None else "no_submission"
    return ctx.result(outcome="failed", best_status=status, failure_class=status, **fields)


RUNNERS: dict[Mode, Callable[[EpisodeContext], EpisodeResult]] = {
    Mode.loop: run_agent_episode,
    Mode.single: run_agent_episode,
    Mode.bash: run_bash_episode,
}


def run_episode(ctx: EpisodeContext) -> EpisodeResult:
    """Run one try of an episode; never raises (but KeyboardInterrupt): what went wrong is in the result."""
    from agent.providers import BaselineUnavailable
    from sandbox.backends import SandboxError
    from sandbox.gpu_pool import GpuPoolError

    started, started_at = time.monotonic(), time.time()
    try:
        result = RUNNERS[ctx.config.mode](ctx)
    except BaselineUnavailable as error:
        result = ctx.result(outcome="skipped", failure_class="not_applicable", message=str(error))
    except (SandboxError, GpuPoolError) as error:
        result = ctx.result(outcome="infra", failure_class="infra:sandbox", message=str(error)[:500])
    except Exception as error:  # noqa: BLE001 - ours, not the model's: recorded, retried, never scored
        ctx.run_dir.mkdir(parents=True, exist_ok=True)
        (ctx.run_dir / "error.txt").write_text(traceback.format_exc())
        log.warning("episode failed with an exception", episode=ctx.episode.id, error=repr(error))
        result = ctx.result(outcome="infra", failure_class="infra:internal", message=f"{type(error).__name__}: {error}"[:500])
    if not result.wall_s:
        result.wall_s = round(time.monotonic() - started, 2)
    result.started_at, result.finished_at = round(started_at, 3), round(time.time(), 3)
    return result
