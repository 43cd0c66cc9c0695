"""What each kind of job does: ``eval`` judges one solution, ``run`` is an agent run (the loop's
public entry point, ``agent.loop.Agent``), ``batch`` is models x problems x samples
(``service.batches``).

``check_*`` validate a request before it is stored (a bad problem, world size or model is a 422,
never a failed job); ``run_*`` do the work in a scheduler thread and return the job's result.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

from agent.errors import UserError
from problems import UnknownProblem, find_problem
from sandbox.harness.config import HarnessConfig
from service.control import JobCancelled, JobControl, JobFailed
from service.evaluations import Evaluations
from service.models import BatchRequest, EvalRequest, RunRequest
from service.store import Job


class RequestRejected(ValueError):
    """A request that can never run as asked; the message says why (HTTP 422)."""


def load_problem(name: str):
    try:
        return find_problem(name)
    except UnknownProblem as error:
        raise RequestRejected(str(error)) from None


def eval_harness(request: EvalRequest | RunRequest, problem) -> HarnessConfig:
    from agent.run_config import harness_config

    extra: dict[str, Any] = {"timed": request.timed}
    if isinstance(request, EvalRequest):
        extra["stress_calls"] = request.stress
    try:
        return harness_config(problem, world=request.world, device=request.device, size=request.size, trials=request.trials,
                              allow_nccl=request.allow_nccl, **extra)
    except UserError as error:
        raise RequestRejected(str(error)) from None


def check_eval(request: EvalRequest, evaluations: Evaluations) -> str:
    """Raise RequestRejected if ``request`` cannot run here; its title."""
    config = eval_harness(request, load_problem(request.problem))
    _check_capacity(config, evaluations)
    return f"{request.problem} w{request.world} {request.device}"


def _check_capacity(config: HarnessConfig, evaluations: Evaluations) -> None:
    try:
        evaluations.check(config)
    except JobFailed as error:
        raise RequestRejected(str(error)) from None


def build_model(spec: str, options: dict[str, Any]):
    from agent.providers import InvalidModelSpec, MissingApiKey, make_model

    try:
        return make_model(spec, **options)
    except MissingApiKey as error:
        raise RequestRejected(f"this server has no key for {spec.split(':', 1)[0]}: {error}") from None
    except InvalidModelSpec as error:
        raise RequestRejected(str(error)) from None
    except Exception as error:  # noqa: BLE001 - e.g. a scripted model with no such script
        raise RequestRejected(f"cannot create model {spec!r}: {type(error).__name__}: {error}") from None


def check_run(request: RunRequest, evaluations: Evaluations) -> str:
    config = eval_harness(request, load_problem(request.problem))
    _check_capacity(config, evaluations)
    build_model(request.model, request.options)
    return f"{request.problem} {request.model} w{request.world} {request.device}"


class CappedModel:
    """A model whose calls wait for one of the server's model-call slots (shared by every job),
    so many runs queue for a provider instead of flooding it; a cancelled job stops waiting."""

    def __init__(self, model, slots: threading.BoundedSemaphore, control: JobControl):
        self.model, self.slots, self.control = model, slots, control

    def __getattr__(self, name: str) -> Any:
        return getattr(self.model, name)

    def complete(self, messages, *args, **kwargs):
        while not self.slots.acquire(timeout=0.5):
            self.control.check()
        try:
            self.control.check()
            response = self.model.complete(messages, *args, **kwargs)
        finally:
            self.slots.release()
        self.control.check()
        return response


def run_eval(job: Job, control: JobControl, evaluations: Evaluations) -> dict[str, Any]:
    request = EvalRequest.model_validate(job.request)
    config = eval_harness(request, load_problem(request.problem))
    report = evaluations.evaluate(request.source, config, control)
    control.emit("verdict", {"status": report.status, "message": report.message, "speedup": report.speedup,
                             "roofline_fraction": report.roofline_fraction, "wall_s": report.wall_s})
    return json.loads(report.model_dump_json())


def run_agent(job: Job, control: JobControl, evaluations: Evaluations, model_slots: threading.BoundedSemaphore, folder: Path,
              request: RunRequest | None = None) -> dict[str, Any]:
    """One agent run in ``folder`` through the loop's public entry point (``agent.episode``: the run
    folder's trajectory, steps/, best/, summary.json); each step's record goes out as a ``step``
    event. Cancelled: the episode records the interruption in its trajectory and JobCancelled goes on up."""
    from agent.budget import Budget
    from agent.episode import Episode
    from agent.run_config import RunConfig

    request = request or RunRequest.model_validate(job.request)
    problem = load_problem(request.problem)
    harness = eval_harness(request, problem)
    llm = CappedModel(build_model(request.model, request.options), model_slots, control)
    config = RunConfig(problem=request.problem, model=request.model, model_options=request.options, mode=request.mode,
                       target_speedup=request.target_speedup, budget=Budget(steps=request.steps, **request.budgets.model_dump()),
                       harness=harness, out=folder.parent, examples=request.examples, cheat_sheet=request.cheat_sheet)

    def evaluate(source: str, step: int):
        return evaluations.evaluate(source, harness, control)

    episode = Episode(config, model=llm, evaluate=evaluate, on_step=lambda record: control.emit("step", record), folder=folder,
                      info={"job": job.id})
    control.emit("run_started", {"steps": config.budget.steps, "problem": request.problem, "model": request.model})
    episode.run()
    return run_result(folder)


def run_result(folder: Path) -> dict[str, Any] | None:
    """A run's result from its folder: summary.json when it finished, else what its trajectory
    saved after the last step (``partial: true``); None when nothing was written."""
    summary = folder / "summary.json"
    if summary.exists():
        return json.loads(summary.read_text())
    from agent.trajectory import find_trajectory

    trajectory = find_trajectory(folder)
    if not trajectory.is_file():
        return None
    info = json.loads(trajectory.read_text()).get("info", {})
    return {"partial": True, "exit_status": info.get("exit_status"), "steps": info.get("steps", []), "best": info.get("best"),
            "model_stats": info.get("model_stats")}


def check_batch(request: BatchRequest, evaluations: Evaluations) -> str:
    from service.batches import BatchConfig, BatchConfigError, check_config

    try:
        config = check_config(request.config)
    except BatchConfigError as error:
        raise RequestRejected(str(error)) from None
    checked = set()
    for episode in BatchConfig.episodes(config):
        if (episode.model, episode.problem) not in checked:
            checked.add((episode.model, episode.problem))
            check_run(episode.request, evaluations)
    return f"batch: {len(config.models)} model(s) x {len(checked) // len(config.models)} problem(s) x {config.samples}"


def run_batch(job: Job, control: JobControl, evaluations: Evaluations, model_slots: threading.BoundedSemaphore,
              folder: Path) -> dict[str, Any]:
    from service.batches import check_config, run_batch as run_episodes

    config = check_config(BatchRequest.model_validate(job.request).config)

    def episode(item, episode_folder: Path) -> dict[str, Any] | None:
        try:
            return run_agent(job, control, evaluations, model_slots, episode_folder, request=item.request)
        except JobCancelled:
            raise
        except RequestRejected as error:
            return {"exit_status": "Rejected", "error": str(error)}

    return run_episodes(config, folder, episode, control)


__all__ = ["CappedModel", "JobCancelled", "RequestRejected", "check_batch", "check_eval", "check_run", "run_agent", "run_batch",
           "run_eval", "run_result"]
