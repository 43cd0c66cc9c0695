"""The agent loop: the model writes a solution, the harness judges it, the model revises.

As plain as mini-swe-agent's agent: ``run`` calls ``step`` until a terminating exception;
non-terminating ones become feedback. The conversation is a list of typed messages
(``agent.messages``: system, task, then each answer with its feedback, thinking and tool calls
kept); the trajectory is saved after every step, and when the run ends for any reason (an
uncaught exception or Ctrl-C included: the exit message then holds the exception and its
traceback).

Public shape (what ``agent.episode`` calls; batch runs and the service call ``run_episode``)::

    agent = Agent(model, problem, config, evaluate, trajectory, on_step=None)
    exit_status = agent.run()       # "LimitsExceeded", "Submitted", "ProviderFailed", "Interrupted", ...

- ``model``: an ``agent.providers.Model``; ``problem``: a loaded ``problems.Problem``;
  ``config``: a ``RunConfig``; ``evaluate(source, step) -> EvalReport``; ``trajectory``: the
  run folder's ``Trajectory``.
- ``on_step(record)`` is called with each step's record (a dict: step, status, message, tokens,
  cost_usd, wall_s, speedup, ...); ``on_progress(info)`` while a streamed answer arrives.
- After ``run``: ``agent.messages`` (ending with the ``exit`` message), ``agent.best``
  (``BestSolution`` or None), ``agent.spend`` (``Spend``), ``agent.records``, ``agent.warnings``.
"""

from __future__ import annotations

import json
import time
import traceback
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, Field

from agent import budget as budgets
from agent.base_agent import BaseAgent, clean_text, console_log
from agent.control import NonTerminating, Submitted, Terminating
from agent.extract import extract_solution
from agent.intervals import overlaps
from agent.prompting import feedback_prompt, system_prompt, task_options, task_prompt
from agent.providers import Message, Model, ModelResponse
from agent.run_config import RunConfig
from agent.trajectory import Trajectory
from problems.contract import Problem
from prompts import render
from sandbox.report import EvalReport


class BestSolution(BaseModel):
    """The fastest correct solution so far (also in ``best/`` of the run folder): the highest
    speedup, and the other correct steps whose timing interval overlaps its own, which the timing
    cannot tell apart from it (a loop that reads them as ranked ranks noise)."""

    step: int
    speedup: float | None = Field(description="None when the run is untimed")
    speedup_ci: list[float] | None = Field(default=None, description="its 95% interval, as the judge reported it")
    status: str
    tied_steps: list[int] = Field(default_factory=list, description="correct steps whose speedup interval overlaps this one's")
    source: str = Field(repr=False)

    def speed(self) -> str:
        if self.speedup is None:
            return "untimed"
        tied = f", not told apart from step{'s' if len(self.tied_steps) > 1 else ''} {', '.join(map(str, self.tied_steps))}" \
            if self.tied_steps else ""
        return f"{self.speedup:.2f}x{tied}"


class Agent(BaseAgent):
    def __init__(self, model: Model, problem: Problem, config: RunConfig, evaluate: Callable[[str, int], EvalReport],
                 trajectory: Trajectory, on_step: Callable[[dict[str, Any]], None] | None = None,
                 task_context: dict[str, Any] | None = None, on_progress: Callable[[dict[str, Any]], None] | None = None):
        super().__init__(model, problem, config, trajectory, on_step, task_context)
        self.evaluate = evaluate
        self.on_progress = on_progress
        self.best: BestSolution | None = None
        self.timed_correct: dict[int, list[float]] = {}  # step -> speedup interval, of every correct timed step
        self.warnings: list[str] = []
        self.seen: dict[str, tuple[int, str, str]] = {}  # solution source -> (step, status, message)
        self.finished = False

    def run(self) -> str:
        """Run until a budget is spent or the run is done; returns the exit status. An uncaught
        exception (Ctrl-C included) is recorded in the trajectory, then raised again."""
        with self.trajectory.event_log(problem=self.problem.name, model=self.config.model) as self.log:
            try:
                self.log.info("run_started", mode=self.config.mode, steps=self.config.budget.steps)
                self._check_setup()
                context = {**task_options(self.problem, self.config.cheat_sheet, self.config.examples,
                                          self.config.harness.device), **self.task_context}
                self.add("system", system_prompt())
                self.add("user", task_prompt(self.problem, self.config.harness, self.config.budget.steps, **context))
                self._save()
                self.spend.started_at = time.monotonic()  # the budgets count from the first model call
                while True:
                    try:
                        self.step()
                    except NonTerminating as control:
                        if control.message:  # a failed model call has nothing to tell the model
                            self.add("user", control.message, step=self.spend.steps, kind=type(control).__name__)
                            self._record(status=type(control).__name__, message=control.message.splitlines()[0])
                    except Terminating as control:
                        self.finish(control.exit_status, control.message)
                        return control.exit_status
                    finally:
                        if not self.finished:
                            self._save()
            except BaseException as error:
                if not self.finished:
                    self.abort(error)
                raise

    def add(self, role: str, content: str, **extra: Any) -> Message:
        message = Message(role=role, content=content, extra={**extra, "timestamp": time.time()})
        self.messages.append(message)
        return message

    def warn(self, text: str) -> None:
        """A warning for the person running this: the event log, the trajectory and stderr."""
        self.warnings.append(text)
        self.log.warning("warning", message=text)
        console_log.warning(text)

    def _check_setup(self) -> None:
        budget = self.config.budget
        if budget.max_run_cost_usd is not None and getattr(self.model, "price_known", True) is False:
            self.warn(f"--max-run-cost ${budget.max_run_cost_usd:g} cannot be kept: there is no price for {self.config.model} "
                      f"(add it to ~/.config/kernel-loop/prices.yaml); the cost of this run is unknown")
        recorded = getattr(self.model, "recorded_problem", None)
        if recorded and recorded != self.problem.name:
            self.warn(f"replaying answers recorded for {recorded!r} onto {self.problem.name!r}: they were written for "
                      f"another problem")

    def step(self) -> None:
        budgets.check(self.config.budget, self.spend)
        response = self.query()
        step = self.spend.steps
        source = extract_solution(response.text, truncated=response.finish_reason == "length",
                                  tool_calls=[c.name for c in response.tool_calls], refusal=response.refusal)
        self.trajectory.write_file(f"steps/{step:03d}/solution.py", source)
        if source in self.seen:
            self._repeated(step, *self.seen[source])
            return
        report = self.evaluate(source, step)
        self.seen[source] = (step, report.status, report.message)
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

    def _repeated(self, step: int, earlier: int, status: str, message: str) -> None:
        """The same solution as an earlier step's: not judged again, the model is told so."""
        self.log.info("repeated", step=step, repeats=earlier)
        self._record(status="repeated", message=f"same solution as step {earlier} ({status}); not evaluated again", repeats=earlier)
        self.add("user", render("repeated", earlier_step=earlier, status=status, message=message.splitlines()[0] if message else ""),
                 step=step, status="repeated", repeats=earlier, solution=f"steps/{step:03d}/solution.py")

    def query(self) -> ModelResponse:
        response = self.ask([m for m in self.messages if m.role != "exit"], progress=self.on_progress)
        step = self.spend.steps
        self.messages.append(response.to_message(
            step=step, finish_reason=response.finish_reason, usage=response.usage.model_dump(), cost=response.cost_usd or 0.0,
            cost_usd=response.cost_usd, model=response.model, latency_s=response.latency_s, attempts=response.attempts,
            streamed=response.streamed, timestamp=time.time()))
        self.trajectory.write_file(f"steps/{step:03d}/response.md", response_markdown(response))
        if not response.usage.reported and self.spend.unknown_usage_calls == 1:
            self.warn(f"{self.config.model} answered without token usage: the tokens and cost of such calls are unknown"
                      + (" and the token/cost budget ends the run" if self.config.budget.max_run_cost_usd or
                         self.config.budget.max_run_tokens else ""))
        return response

    def _keep_if_best(self, step: int, source: str, report: EvalReport) -> None:
        if not report.correct:
            return
        if report.speedup is not None:
            self.timed_correct[step] = report.speedup_ci or [report.speedup, report.speedup]
        if self.best is None or (report.speedup or 0.0) > (self.best.speedup or 0.0):
            self.best = BestSolution(step=step, speedup=report.speedup, speedup_ci=report.speedup_ci, status=report.status,
                                     source=source)
            self.trajectory.write_file("best/solution.py", source)
            self.trajectory.write_file("best/report.json", report.model_dump_json(indent=2))
        if self.best.step in self.timed_correct:
            mine = self.timed_correct[self.best.step]
            self.best.tied_steps = [other for other, interval in self.timed_correct.items()
                                    if other != self.best.step and overlaps(interval, mine)]

    def _stats(self) -> dict[str, Any]:
        return {**super()._stats(), "best": self.best.model_dump(exclude={"source"}) if self.best else None,
                "warnings": self.warnings}

    def abort(self, error: BaseException) -> None:
        """End the run on an exception that was not the loop's own: Ctrl-C is ``Interrupted``,
        anything else its class name; the exit message keeps the exception and its traceback."""
        if isinstance(error, KeyboardInterrupt):
            self.finish("Interrupted", str(error) or "interrupted (Ctrl-C)", exception=error)
        else:
            self.finish(type(error).__name__, f"uncaught {type(error).__name__}: {error}", exception=error)

    def finish(self, exit_status: str, message: str, exception: BaseException | None = None) -> None:
        self.finished = True
        submission = self.best.source if self.best else ""
        summary = f"{exit_status}: {message or exit_status}"
        if self.best:
            summary += f"; best: step {self.best.step} ({self.best.speed()})"
        else:
            summary += "; no correct solution"
        extra: dict[str, Any] = {"exit_status": exit_status, "submission": submission}
        if exception is not None:
            extra.update(exception_str=str(exception), exception_type=type(exception).__name__,
                         traceback="".join(traceback.format_exception(exception)))
        self.add("exit", summary, **extra)
        self.trajectory.save_final(self.messages, exit_status=exit_status, submission=submission, message=summary,
                                   wall_s=self.spend.wall_s, **self._stats())
        self.log.info("run_finished", exit_status=exit_status, message=summary)


def response_markdown(response: ModelResponse) -> str:
    """A step's ``response.md``: the answer, and what else it held (refusal, tool calls)."""
    parts = [response.text]
    if response.refusal:
        parts.append(f"\n\n**Refusal:** {response.refusal}")
    for call in response.tool_calls:
        arguments = call.raw_arguments if call.raw_arguments is not None else json.dumps(call.arguments, indent=2)
        parts.append(f"\n\n**Tool call** `{call.name}` (id {call.id}):\n\n```json\n{clean_text(arguments)}\n```")
    return "".join(parts)

