"""Batch jobs: ``kloop batch``'s batches, run by the server.

A batch is agent/batch's in every respect: the same config (``BatchConfig``, as JSON), the same
episodes and runner, the same batch folder (results.jsonl, episodes/, runs/, kill -9 safe, a
re-run resumes), the same summary.json and report.html. What the server adds:

- a check before the job is stored (422 with agent/batch's own message on a bad config); the
  fields that choose where candidates run (sandbox, gpus, ray, pkb_root) are the server's, and
  models and their options are limited as for runs (no keys, endpoints or files of the server);
- :class:`ServiceExecutor`: episodes judged through the server's evaluation capacity (CPU slots,
  the GPU pool, warm harnesses), model calls through its model-call slots, a cancel ending them;
- :class:`ServiceProgress`: each episode as an event (and each step of one, from the executor),
  the summary so far as the job's result.

After a kill -9 the batch is queued again and resumes in its folder: finished episodes stay.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from agent.batch.config import BatchConfig, Mode, parse_config
from agent.batch.episode import EpisodeContext
from agent.batch.episodes import Episode, EpisodeResult, enumerate_episodes
from agent.batch.executor_local import LocalExecutor
from agent.batch.progress import BatchProgress
from agent.errors import UserError
from sandbox.harness.config import gpus_needed
from service.control import JobControl, JobFailed
from service.evaluations import Evaluations
from service.jobs import ModelCallGate, RequestRejected, load_problem
from service.models import BatchRequest, check_model_options, check_model_spec
from service.store import Job

MAX_EPISODES = 2000
MAX_WORKERS = 16
SERVER_DECIDES = ("sandbox", "gpus", "ray", "pkb_root")
PARTIAL_RESAMPLES = 200  # the summary while the batch runs; the final one has agent/batch's full bootstrap
PARTIAL_EVERY_S = 2.0


@dataclass
class CheckedBatch:
    config: BatchConfig
    text: str  # the config as the batch folder's config.yaml
    episodes: list[Episode]

    @property
    def title(self) -> str:
        problems = len({e.problem for e in self.episodes})
        return f"batch: {len(self.config.models)} model(s) x {problems} problem(s) x {self.config.samples}"


def check_batch(data: dict[str, Any], evaluations: Evaluations) -> CheckedBatch:
    """``data`` as a batch this server can run; RequestRejected (-> 422) saying why not."""
    from agent.batch.runner import check_models
    from agent.run_config import harness_config

    given = [f"config.{name}" for name in SERVER_DECIDES
             if name in data and not (name == "sandbox" and data[name] in ("local", {"backend": "local"}))]  # the default may be named
    if given:
        them = "them" if len(given) > 1 else "it"
        raise RequestRejected(f"{', '.join(given)}: the server decides where candidates run; leave {them} out")
    try:
        config = parse_config(data, "config")
    except UserError as error:
        raise RequestRejected(str(error)) from None
    if config.mode is Mode.bash:
        raise RequestRejected("config.mode: bash mode is not offered by the service yet; use loop or single")
    for entry in config.models:
        try:
            check_model_spec(entry.spec)
            check_model_options(entry.options)
        except ValueError as error:
            raise RequestRejected(f"config.models: {entry.label}: {error}") from None
    try:
        episodes = enumerate_episodes(config)
        if len(episodes) > MAX_EPISODES:
            raise UserError(f"{len(episodes)} episodes; a batch on this server has at most {MAX_EPISODES}")
        for selector in dict.fromkeys(e.selector for e in episodes):
            harness = harness_config(load_problem(selector), world=config.world, device=config.device, size=config.size,
                                     trials=config.trials, timed=config.timed, timing_precision=config.timing_precision,
                                     allow_nccl=config.allow_nccl)
            evaluations.check(harness)
        check_models(config)
    except (UserError, JobFailed) as error:
        raise RequestRejected(str(error)) from None
    return CheckedBatch(config, yaml.safe_dump(data, sort_keys=False), episodes)


class ServiceExecutor(LocalExecutor):
    """agent/batch's local executor, but every evaluation waits for the server's capacity (its
    CPU slots or GPUs from its pool) and every model call for a server model-call slot, after the
    batch's own per-provider cap. A cancelled job stops the batch (its processes are ended by the
    cancel; episodes cut short are not recorded, so a resume runs them again)."""

    def __init__(self, config: BatchConfig, control: JobControl, evaluations: Evaluations, model_slots: threading.BoundedSemaphore):
        needed = gpus_needed(config.device, config.world)
        default = max(1, len(evaluations.gpus) // needed) if needed else evaluations.cpu_slots
        super().__init__(config, min(config.workers or default, MAX_WORKERS), gpus=())  # GPUs are leased per evaluation
        self.control, self.evaluations, self.model_slots = control, evaluations, model_slots

    def describe(self) -> str:
        return f"the server's capacity, {self.capacity} episodes at once"

    def prepare(self, ctx: EpisodeContext) -> None:
        ctx.gate = ModelCallGate(self.model_slots, self.control, first=self.gates.gate(ctx.entry.provider))
        ctx.evaluate = lambda source, harness: self.evaluations.evaluate(source, harness, self.control)
        ctx.on_step = lambda record: self.control.emit("step", {**record, "episode": ctx.episode.id})

    def wait(self, timeout_s: float) -> list[tuple[EpisodeContext, EpisodeResult]]:
        finished = super().wait(timeout_s)
        self.control.check()  # cancelled: JobCancelled, and what ended with it is not a result
        return finished


class ServiceProgress(BatchProgress):
    """The batch's progress as the job's events (``batch_started``, ``episode_started``,
    ``episode``: an EpisodeResult, ``episode_retried``) and its result (the summary so far)."""

    def __init__(self, control: JobControl, samples: int):
        super().__init__(None)
        self.control, self.samples = control, samples
        self.results: list[EpisodeResult] = []
        self._published = 0.0

    def start(self, total: int, done: list[EpisodeResult], executor: str) -> None:
        super().start(total, done, executor)
        self.results = list(done)
        self.control.emit("batch_started", {"episodes": total, "executor": executor,
                                            "done": [r.model_dump(mode="json", exclude={"steps"}) for r in done]})
        self.publish(force=True)

    def started(self, episode: Episode) -> None:
        super().started(episode)
        self.control.emit("episode_started", {"id": episode.id, "model": episode.model, "problem": episode.problem,
                                              "sample": episode.sample})

    def retried(self, result: EpisodeResult) -> None:
        super().retried(result)
        self.control.emit("episode_retried", result.model_dump(mode="json"))

    def finished(self, result: EpisodeResult) -> None:
        super().finished(result)
        self.results.append(result)
        self.control.emit("episode", result.model_dump(mode="json"))
        self.publish()

    def progress(self) -> dict[str, Any]:
        return {"total": self.total, "finished": len(self.results), "running": self.running, "outcomes": dict(self.counts),
                "spend_usd": round(self.spend, 6)}

    def publish(self, force: bool = False) -> None:
        from agent.batch.metrics import summarize

        if not force and time.monotonic() - self._published < PARTIAL_EVERY_S and len(self.results) < self.total:
            return
        self._published = time.monotonic()
        summary = summarize(self.results, samples=self.samples, resamples=PARTIAL_RESAMPLES)
        self.control.store.set_result(self.control.job.id, {**summary, "progress": self.progress()})


def run_batch_job(job: Job, control: JobControl, evaluations: Evaluations, model_slots: threading.BoundedSemaphore,
                  folder: Path) -> dict[str, Any]:
    """The batch in ``folder`` (resumed when it has results); its summary.json with ``progress``."""
    from agent.batch.report import write_reports
    from agent.batch.runner import run_batch

    try:
        checked = check_batch(BatchRequest.model_validate(job.request).config, evaluations)
    except RequestRejected as error:  # accepted once; the server changed since (fewer GPUs, no key)
        raise JobFailed(str(error)) from None
    progress = ServiceProgress(control, checked.config.samples)
    try:
        executor = ServiceExecutor(checked.config, control, evaluations, model_slots)
        outcome = run_batch(checked.config, checked.text, folder, executor=executor, progress=progress)
    except UserError as error:
        raise JobFailed(str(error)) from None
    summary = write_reports(folder)
    return {**summary, "progress": {**progress.progress(), "running": 0, "stopped_by_cost": outcome.stopped_by_cost}}


def partial_result(folder: Path, result: Any) -> Any:
    """A cancelled or failed batch's result: the summary of what finished (summary.json and
    report.html written), with the progress it had."""
    from agent.batch.report import write_reports

    if not (folder / "episodes").is_dir() or not any((folder / "episodes").glob("*.json")):
        return result
    summary = write_reports(folder)
    progress = result.get("progress") or {} if isinstance(result, dict) else {}
    return {**summary, "progress": {**progress, "finished": summary["episodes"], "running": 0}}
