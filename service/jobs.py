"""What each kind of job does: ``eval`` judges one solution, ``run`` is an agent run (the loop's
public entry point, ``agent.episode.Episode``); ``batch`` (models x problems x samples) is in
``service.batches``.

``check_*`` validate a request before it is stored (a bad problem, world size or model is a 422,
never a failed job); ``run_*`` do the work in a scheduler thread and return the job's result.
"""

from __future__ import annotations

import json
import threading
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from agent.errors import UserError
from problems import UnknownProblem, find_problem
from sandbox.harness.config import HarnessConfig
from service.control import JobControl, JobFailed
from service.evaluations import Evaluations
from service.models import EvalRequest, RunRequest
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

    extra: dict[str, Any] = {"timed": request.timed, "timing_precision": request.timing_precision}
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


class ModelCallGate:
    """The gate a job's model calls pass: one of the server's model-call slots (shared by every
    job), so many runs queue for a provider instead of flooding it, after ``first`` (a batch's
    per-provider cap) where given. A cancelled job stops waiting, and stops after the call.
    Reentrant across threads: it keeps no state of its own between enter and exit."""

    def __init__(self, slots: threading.BoundedSemaphore, control: JobControl, first: AbstractContextManager | None = None):
        self.slots, self.control, self.first = slots, control, first

    def __enter__(self) -> None:
        if self.first is not None:
            self.first.__enter__()
        try:
            while not self.slots.acquire(timeout=0.5):
                self.control.check()
        except BaseException:
            self._leave_first()
            raise
        try:
            self.control.check()
        except BaseException:
            self.__exit__(None, None, None)
            raise

    def __exit__(self, error_type, *_: Any) -> None:
        self.slots.release()
        self._leave_first()
        if error_type is None:
            self.control.check()

    def _leave_first(self) -> None:
        if self.first is not None:
            self.first.__exit__(None, None, None)


def run_eval(job: Job, control: JobControl, evaluations: Evaluations) -> dict[str, Any]:
    request = EvalRequest.model_validate(job.request)
    config = eval_harness(request, load_problem(request.problem))
    report = evaluations.evaluate(request.source, config, control)
    control.emit("verdict", {"status": report.status, "message": report.message, "speedup": report.speedup,
                             "roofline_fraction": report.roofline_fraction, "wall_s": report.wall_s})
    return json.loads(report.model_dump_json())


def run_agent(job: Job, control: JobControl, evaluations: Evaluations, model_slots: threading.BoundedSemaphore,
              folder: Path) -> dict[str, Any]:
    """One agent run in ``folder`` through the loop's public entry point (``agent.episode``: the run
    folder's trajectory, steps/, best/, summary.json); each step's record goes out as a ``step``
    event. Cancelled: the episode records the interruption in its trajectory and JobCancelled goes on up."""
    from agent.batch.episode import GatedModel
    from agent.budget import Budget
    from agent.episode import Episode
    from agent.run_config import RunConfig

    request = RunRequest.model_validate(job.request)
    problem = load_problem(request.problem)
    harness = eval_harness(request, problem)
    llm = GatedModel(build_model(request.model, request.options), ModelCallGate(model_slots, control))
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


__all__ = ["ModelCallGate", "RequestRejected", "check_eval", "check_run", "run_agent", "run_eval", "run_result"]
