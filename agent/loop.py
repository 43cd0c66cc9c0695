"""The agent loop: the model writes a solution, the harness judges it, the model revises.

As plain as mini-swe-agent's agent: ``run`` calls ``step`` until a terminating exception;
non-terminating ones become feedback. The conversation is a list of typed messages
(``agent.messages``: system, task, then each answer with its feedback, thinking and tool calls
kept); the trajectory is saved after every step.

Public shape (what the CLI, batch runs and the service call)::

    agent = Agent(model, problem, config, evaluate, trajectory, on_step=None)
    exit_status = agent.run()       # "LimitsExceeded", "Submitted", "ProviderFailed", ...

- ``model``: an ``agent.providers.Model``; ``problem``: a loaded ``problems.Problem``;
  ``config``: a ``RunConfig`` (budget, harness orders, prompt switches; ``mode="single"`` is a
  one-step budget); ``evaluate(source, step) -> EvalReport`` (e.g. ``EvaluationSession.evaluate``);
  ``trajectory``: the run folder's ``Trajectory``.
- ``on_step(record)`` is called with each step's record (a dict: step, status, message, tokens,
  cost_usd, wall_s, speedup, ...).
- After ``run``: ``agent.messages`` (ending with the ``exit`` message), ``agent.best``
  (``BestSolution`` or None), ``agent.spend`` (``Spend``), ``agent.records``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, Field

from agent import budget as budgets
from agent.control import NonTerminating, ProviderFailed, Submitted, Terminating
from agent.extract import extract_solution
from agent.prompting import feedback_prompt, system_prompt, task_options, task_prompt
from agent.providers import Message, Model, ModelResponse, ProviderError
from agent.run_config import RunConfig
from agent.trajectory import Trajectory
from problems.contract import Problem
from sandbox.report import EvalReport

MAX_PROVIDER_FAILURES = 3


class BestSolution(BaseModel):
    """The fastest correct solution so far (also in ``best/`` of the run folder)."""

    step: int
    speedup: float | None = Field(description="None when the run is untimed")
    status: str
    source: str = Field(repr=False)


class Agent:
    def __init__(self, model: Model, problem: Problem, config: RunConfig, evaluate: Callable[[str, int], EvalReport],
                 trajectory: Trajectory, on_step: Callable[[dict[str, Any]], None] | None = None,
                 task_context: dict[str, Any] | None = None):
        self.model, self.problem, self.config = model, problem, config
        self.evaluate = evaluate
        self.trajectory = trajectory
        self.on_step = on_step or (lambda record: None)
        self.task_context = task_context or {}
        self.messages: list[Message] = []
        self.spend = budgets.Spend()
        self.best: BestSolution | None = None
        self.records: list[dict[str, Any]] = []
        self.provider_failures = 0

    def run(self) -> str:
        """Run until a budget is spent or the run is done; returns the exit status."""
        context = {**task_options(self.problem, self.config.cheat_sheet, self.config.examples), **self.task_context}
        self.add("system", system_prompt())
        self.add("user", task_prompt(self.problem, self.config.harness, self.config.budget.steps, **context))
        with self.trajectory.event_log(problem=self.problem.name, model=self.config.model) as self.log:
            self.log.info("run_started", mode=self.config.mode, steps=self.config.budget.steps)
            exit_status, message = "Interrupted", "interrupted"
            try:
                while True:
                    try:
                        self.step()
                    except NonTerminating as control:
                        if control.message:  # a failed model call has nothing to tell the model
                            self.add("user", control.message, step=self.spend.steps, kind=type(control).__name__)
                            self._record(status=type(control).__name__, message=control.message.splitlines()[0])
                    except Terminating as control:
                        exit_status, message = control.exit_status, control.message
                        break
                    finally:
                        self._save()
            finally:
                self._finish(exit_status, message)
        return exit_status

    def add(self, role: str, content: str, **extra: Any) -> Message:
        message = Message(role=role, content=content, extra=extra)
        self.messages.append(message)
        return message

    def step(self) -> None:
        budgets.check(self.config.budget, self.spend)
        response = self.query()
        source = extract_solution(response.text, truncated=response.finish_reason == "length")
        step = self.spend.steps
        self.trajectory.write_file(f"steps/{step:03d}/solution.py", source)
        report = self.evaluate(source, step)
        self.trajectory.write_file(f"steps/{step:03d}/report.json", report.model_dump_json(indent=2))
        self._keep_if_best(step, source, report)
        self.log.info("evaluated", step=step, status=report.status, speedup=report.speedup, wall_s=report.wall_s)
        self._record(status=report.status, message=report.message, speedup=report.speedup, eval_wall_s=report.wall_s)
        feedback = feedback_prompt(report, step, self.config.budget, self.spend, self.best)
        self.add("user", feedback, step=step, status=report.status, speedup=report.speedup,
                 report=f"steps/{step:03d}/report.json", solution=f"steps/{step:03d}/solution.py")
        target = self.config.target_speedup
        if target is not None and report.correct and report.speedup is not None and report.speedup >= target:
            raise Submitted(f"target speedup {target}x reached at step {step} ({report.speedup:.2f}x)")

    def query(self) -> ModelResponse:
        self.spend.steps += 1
        try:
            response = self.model.complete(self.messages)
        except ProviderError as error:
            self.provider_failures += 1
            self.log.warning("provider_error", step=self.spend.steps, error=str(error))
            self._record(status="provider_error", message=str(error)[:300])
            if self.provider_failures >= MAX_PROVIDER_FAILURES:
                raise ProviderFailed(f"the model provider failed {self.provider_failures} times in a row: {error}") from error
            raise _Retry() from error
        self.provider_failures = 0
        self.spend.add(response)
        self.messages.append(response.to_message(step=self.spend.steps, finish_reason=response.finish_reason,
                                                 usage=response.usage.model_dump(), cost_usd=response.cost_usd,
                                                 latency_s=response.latency_s, attempts=response.attempts))
        self.trajectory.write_file(f"steps/{self.spend.steps:03d}/response.md", response.text)
        self.log.info("model_response", step=self.spend.steps, finish_reason=response.finish_reason,
                      **response.usage.model_dump(), cost_usd=response.cost_usd, latency_s=response.latency_s)
        return response

    def _keep_if_best(self, step: int, source: str, report: EvalReport) -> None:
        if not report.correct:
            return
        if self.best is None or (report.speedup or 0.0) > (self.best.speedup or 0.0):
            self.best = BestSolution(step=step, speedup=report.speedup, status=report.status, source=source)
            self.trajectory.write_file("best/solution.py", source)
            self.trajectory.write_file("best/report.json", report.model_dump_json(indent=2))

    def _record(self, **fields: Any) -> None:
        record = {"step": self.spend.steps, "tokens": self.spend.tokens, "cost_usd": self.spend.known_cost_usd,
                  "wall_s": round(self.spend.wall_s, 1), **fields}
        self.records.append(record)
        self.on_step(record)

    def _save(self) -> None:
        self.trajectory.info.update(self._stats())
        self.trajectory.save(self.messages)

    def _stats(self) -> dict[str, Any]:
        return {"model_stats": {"instance_cost": self.spend.known_cost_usd, "api_calls": self.spend.steps,
                                "input_tokens": self.spend.input_tokens, "output_tokens": self.spend.output_tokens,
                                "cached_input_tokens": self.spend.cached_input_tokens, "reasoning_tokens": self.spend.reasoning_tokens},
                "best": self.best.model_dump(exclude={"source"}) if self.best else None, "steps": self.records}

    def _finish(self, exit_status: str, message: str) -> None:
        submission = self.best.source if self.best else ""
        summary = message or exit_status
        if self.best:
            speed = f"{self.best.speedup:.2f}x" if self.best.speedup is not None else "untimed"
            summary += f"; best: step {self.best.step} ({speed})"
        else:
            summary += "; no correct solution"
        self.add("exit", summary, exit_status=exit_status, submission=submission)
        stats = self._stats()
        self.trajectory.info.update(exit_status=exit_status, submission=submission, **stats)
        self.trajectory.save(self.messages)
        self.trajectory.write_file("summary.json", json.dumps(
            {"exit_status": exit_status, "message": summary, "wall_s": round(self.spend.wall_s, 2), **stats}, indent=2, default=str))
        self.log.info("run_finished", exit_status=exit_status, message=summary)


class _Retry(NonTerminating):
    """A failed model call: nothing to tell the model; the next step asks again."""
