"""One episode: a config in, a run folder with its trajectory out. The one public way to run
the loop (``kloop run``, batch runs and the service call it)::

    from agent.episode import run_episode
    result = run_episode(config)              # config: agent.run_config.RunConfig
    result.exit_status, result.trajectory_path, result.best_speedup, result.cost_usd

``Episode(config)`` makes the run folder (race-free, under ``config.out``) and writes
``config.json`` and a first trajectory before anything can fail or be interrupted; ``run()``
opens the sandbox, runs the loop and returns an :class:`EpisodeResult`. The trajectory is final
whatever happens: an exception (Ctrl-C included) is recorded in it and raised again.
Optional arguments: ``model`` (a ready ``Model`` instead of ``make_model(config.model,
**config.model_options)``), ``evaluate(source, step) -> EvalReport`` (instead of a sandbox
session), ``on_step(record)`` after each step, ``on_progress(info)`` while an answer streams,
``folder`` (the run folder to use, made if missing, instead of a new one under ``config.out``)
and ``info`` (more fields for the trajectory's ``info``, e.g. a batch's episode id).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from agent.run_config import RunConfig


class EpisodeResult(BaseModel):
    """What one episode ended with (the trajectory holds the rest)."""

    exit_status: str
    message: str
    folder: Path
    trajectory_path: Path
    steps: int
    best_step: int | None = None
    best_speedup: float | None = None
    best_solution_path: Path | None = None
    correct: bool = False
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float | None = None
    wall_s: float = 0.0
    warnings: list[str] = []


class Episode:
    def __init__(self, config: RunConfig, *, model: Any = None, evaluate: Callable | None = None,
                 on_step: Callable[[dict[str, Any]], None] | None = None,
                 on_progress: Callable[[dict[str, Any]], None] | None = None, folder: Path | None = None,
                 info: dict[str, Any] | None = None):
        from agent.trajectory import start_run
        from problems import find_problem

        self.config = config
        self.problem = find_problem(config.problem, config.pkb_root)
        self.model = model
        self.evaluate = evaluate
        self.on_step, self.on_progress = on_step, on_progress
        self.trajectory = start_run(config, self.problem.name, folder, info)
        self.folder: Path = self.trajectory.folder
        self.agent = None
        self._ended = False

    @property
    def trajectory_path(self) -> Path:
        return self.trajectory.path

    def run(self) -> EpisodeResult:
        from agent.loop import Agent

        try:
            if self.model is None:
                from agent.providers import make_model

                self.model = make_model(self.config.model, **self.config.model_options)
            if self.evaluate is not None:
                return self._run(Agent, self.evaluate)
            from agent.session import EvaluationSession

            with EvaluationSession(self.config.harness, self.config.sandbox, warm=self.config.budget.steps > 1) as session:
                return self._run(Agent, session.evaluate)
        except BaseException as error:
            self.abort(error)
            raise

    def _run(self, agent_class: type, evaluate: Callable) -> EpisodeResult:
        self.agent = agent_class(self.model, self.problem, self.config, evaluate, self.trajectory, on_step=self.on_step,
                                 on_progress=self.on_progress)
        exit_status = self.agent.run()
        agent, spend = self.agent, self.agent.spend
        best = agent.best
        return EpisodeResult(
            exit_status=exit_status, message=agent.messages[-1].content, folder=self.folder, trajectory_path=self.trajectory.path,
            steps=spend.steps, best_step=best.step if best else None, best_speedup=best.speedup if best else None,
            best_solution_path=self.folder / "best" / "solution.py" if best else None, correct=best is not None,
            input_tokens=spend.input_tokens, output_tokens=spend.output_tokens, cost_usd=spend.known_cost_usd,
            wall_s=round(spend.wall_s, 2), warnings=list(agent.warnings))

    @property
    def ended(self) -> bool:
        """Whether the trajectory holds the run's end (its exit message)."""
        return self._ended or (self.agent is not None and self.agent.finished)

    def abort(self, error: BaseException) -> None:
        """Record ``error`` as the run's end unless the run already ended (e.g. Ctrl-C while the
        sandbox started: the loop never ran)."""
        if self.ended:
            return
        if self.agent is not None:
            self.agent.abort(error)
            return
        self._ended = True
        import time
        import traceback

        from agent.providers import Message

        status = "Interrupted" if isinstance(error, KeyboardInterrupt) else type(error).__name__
        text = (str(error) or "interrupted (Ctrl-C)") if isinstance(error, KeyboardInterrupt) else f"{type(error).__name__}: {error}"
        exit_message = Message(role="exit", content=f"{status}: {text}; the loop had not started", extra={
            "exit_status": status, "submission": "", "exception_str": str(error), "exception_type": type(error).__name__,
            "traceback": "".join(traceback.format_exception(error)), "timestamp": time.time()})
        self.trajectory.save_final([exit_message], exit_status=status, submission="", message=exit_message.content)


def run_episode(config: RunConfig, **options: Any) -> EpisodeResult:
    """Run one episode to its end (see the module's docstring for ``options``)."""
    return Episode(config, **options).run()
