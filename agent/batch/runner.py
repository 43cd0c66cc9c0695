"""``run_batch``: every episode of a config that has no result yet, on an executor, each result
recorded the moment it comes back; infrastructure failures run again (a bounded number of
times); the summary written at the end. Running it again resumes."""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import structlog

from agent.batch.config import BatchConfig
from agent.batch.episode import EpisodeContext
from agent.batch.episodes import Episode, EpisodeResult, enumerate_episodes, matches
from agent.batch.progress import BatchProgress
from agent.batch.store import ResultStore
from agent.errors import UserError

log = structlog.get_logger(__name__)

EXECUTORS = ("local", "ray")


class Executor(Protocol):
    """Where episodes run: ``submit(ctx)`` starts one, ``wait(timeout_s)`` returns those that ended
    (and may raise to stop the batch), ``close()`` gives everything back."""

    capacity: int
    caps_in_flight_per_provider: bool

    def describe(self) -> str: ...

    def submit(self, ctx: EpisodeContext) -> None: ...

    def wait(self, timeout_s: float) -> list[tuple[EpisodeContext, EpisodeResult]]: ...

    def close(self) -> None: ...


@dataclass
class BatchOutcome:
    folder: Path
    selected: int = 0
    already_done: int = 0
    ran: int = 0
    retried_infra: int = 0
    stopped_by_cost: int = 0
    outcomes: Counter = field(default_factory=Counter)


def check_models(config: BatchConfig) -> None:
    """Every model can be made (specs, options, API keys) before anything runs."""
    from agent.providers import InvalidModelSpec, MissingApiKey, make_model
    from agent.providers.baseline import BASELINES

    for entry in config.models:
        if entry.is_baseline:
            if entry.spec.partition(":")[2] not in BASELINES:
                raise UserError(f"models: unknown baseline {entry.spec!r}; baseline:reference or baseline:oracle")
            continue
        try:
            make_model(entry.spec, **entry.options)
        except (InvalidModelSpec, MissingApiKey) as error:
            raise UserError(f"models: {error}") from None
        except Exception as error:  # noqa: BLE001 - a missing script, a bad option: one line
            raise UserError(f"models: cannot create {entry.spec!r}: {error}") from None


def check_problems(config: BatchConfig, episodes: list[Episode]) -> None:
    from agent.run_config import check_world_size
    from problems import find_problem

    for selector in dict.fromkeys(e.selector for e in episodes):
        check_world_size(find_problem(selector, config.pkb_root), config.world)


def make_executor(name: str | Executor, config: BatchConfig, workers: int | None) -> Executor:
    if not isinstance(name, str):
        return name  # made by the caller (the service's, which judges through the server's capacity)
    if name == "local":
        from agent.batch.executor_local import LocalExecutor

        return LocalExecutor(config, workers)
    if name == "ray":
        from agent.batch.executor_ray import RayExecutor

        return RayExecutor(config, workers)
    raise UserError(f"unknown executor {name!r}; choose one of {', '.join(EXECUTORS)}")


def run_batch(config: BatchConfig, config_text: str, folder: Path, *, workers: int | None = None, executor: str | Executor = "local",
              pattern: str | None = None, redo_failed: bool = False, progress: BatchProgress | None = None) -> BatchOutcome:
    episodes = enumerate_episodes(config)
    check_problems(config, episodes)
    check_models(config)
    store = ResultStore(folder).open(config, config_text)
    selected = [e for e in episodes if matches(e, pattern)]
    if pattern and not selected:
        raise UserError(f"--filter {pattern!r} matches none of the {len(episodes)} episodes (ids look like {episodes[0].id})")
    if redo_failed:
        store.forget({e.id for e in selected if e.id in store.finished and store.finished[e.id].outcome == "infra"})
    outcome = BatchOutcome(folder=Path(folder), selected=len(selected))
    pending = deque(e for e in selected if e.id not in store.finished)
    outcome.already_done = len(selected) - len(pending)
    progress = progress or BatchProgress(None)
    runner = make_executor(executor, config, workers)
    progress.start(total=len(selected), done=[store.finished[e.id] for e in selected if e.id in store.finished],
                   executor=runner.describe())
    in_flight: Counter = Counter()  # by provider
    try:
        while pending or in_flight.total():
            spent = sum(r.cost_usd or 0.0 for r in store.finished.values())
            capped = config.max_cost_usd is not None and spent >= config.max_cost_usd
            while pending and not capped and in_flight.total() < runner.capacity:
                episode = _next_submittable(pending, config, in_flight, runner.caps_in_flight_per_provider)
                if episode is None:
                    break
                ctx = EpisodeContext(episode=episode, config=config, folder=Path(folder), attempt=store.next_try(episode.id),
                                     infra_attempts=store.infra_attempts(episode.id))
                ctx.run_dir.mkdir(parents=True, exist_ok=True)  # claims the try number
                runner.submit(ctx)
                in_flight[ctx.entry.provider] += 1
                progress.started(episode)
            if capped and not in_flight.total():
                outcome.stopped_by_cost = len(pending)
                break
            for ctx, result in runner.wait(timeout_s=0.5):
                in_flight[ctx.entry.provider] -= 1
                _finish(ctx, result, store, pending, outcome, progress)
    finally:
        runner.close()
        progress.stop()
    return outcome


def _next_submittable(pending: deque, config: BatchConfig, in_flight: Counter, per_provider: bool) -> Episode | None:
    """The first pending episode whose provider is under its cap (when the executor caps by episode)."""
    for index, episode in enumerate(pending):
        provider = episode.spec.partition(":")[0].strip().lower()
        if not per_provider or in_flight[provider] < config.cap(provider):
            del pending[index]
            return episode
    return None


def _finish(ctx: EpisodeContext, result: EpisodeResult, store: ResultStore, pending: deque, outcome: BatchOutcome,
            progress: BatchProgress) -> None:
    if result.outcome == "infra" and store.infra_attempts(result.id) < ctx.config.infra_retries:
        store.record_infra_attempt(result)
        outcome.retried_infra += 1
        pending.appendleft(ctx.episode)
        log.info("infrastructure failure, running the episode again", episode=result.id, why=result.failure_class)
        progress.retried(result)
        return
    store.record(result)
    outcome.ran += 1
    outcome.outcomes[result.outcome] += 1
    progress.finished(result)
