"""What the loop's ``Agent`` (agent.loop) and bash mode's ``BashAgent`` (agent.bash.agent) share:
the conversation, the spend, each step's record and the model call.

``ask`` makes one model call the same way in both modes: a call that would run past the
wall-time budget ends the run (``LimitsExceeded``); a refused key or a rejected request ends it
at once, any other failure after ``MAX_PROVIDER_FAILURES`` in a row (``ProviderFailed``); a failed
call is no step (``CallFailed``: nothing to tell the model, the next step asks again); an
answered one is added to the spend with its text cleaned of lone surrogates.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import structlog

from agent import budget as budgets
from agent.control import LimitsExceeded, NonTerminating, ProviderFailed
from agent.providers import DeadlineExceeded, FatalProviderError, Message, Model, ModelResponse, ProviderError, ToolSpec
from agent.run_config import RunConfig
from agent.trajectory import Trajectory
from problems.contract import Problem

MAX_PROVIDER_FAILURES = 3  # failed model calls in a row that end a run (ProviderFailed)
LONE_SURROGATE = re.compile("[\ud800-\udfff]")
console_log = structlog.get_logger("agent.loop")


def clean_text(text: str) -> str:
    """``text`` with lone surrogates (a model's broken JSON escapes) replaced by U+FFFD, so that
    files, the harness and the next request can carry it."""
    return LONE_SURROGATE.sub("\ufffd", text)


class CallFailed(NonTerminating):
    """A failed model call: nothing to tell the model; the next step asks again."""


class BaseAgent:
    def __init__(self, model: Model, problem: Problem, config: RunConfig, trajectory: Trajectory,
                 on_step: Callable[[dict[str, Any]], None] | None = None, task_context: dict[str, Any] | None = None):
        self.model, self.problem, self.config, self.trajectory = model, problem, config, trajectory
        self.on_step = on_step or (lambda record: None)
        self.task_context = task_context or {}
        self.messages: list[Message] = []
        self.spend = budgets.Spend()
        self.records: list[dict[str, Any]] = []
        self.provider_failures = 0
        self.log: Any = console_log

    def ask(self, messages: list[Message], tools: list[ToolSpec] | None = None,
            progress: Callable[[dict[str, Any]], None] | None = None) -> ModelResponse:
        """One model call (see the module's docstring); the answer is counted, not yet added to
        the conversation."""
        try:
            response = self.model.complete(messages, tools=tools, deadline=self.spend.deadline(self.config.budget), progress=progress)
        except DeadlineExceeded as error:
            raise LimitsExceeded(f"wall-time budget of {self.config.budget.max_run_wall_s:g} s spent: {error}") from error
        except FatalProviderError as error:  # a bad key or request fails the same way next time
            self.spend.failed_calls += 1
            self.log.error("provider_error", step=self.spend.steps + 1, error=str(error), fatal=True)
            self._record(status="provider_error", message=str(error)[:300])
            raise ProviderFailed(str(error)) from error
        except ProviderError as error:
            self.spend.failed_calls += 1  # a call without an answer is not a step (Spend.add counts answered ones)
            self.provider_failures += 1
            self.log.warning("provider_error", step=self.spend.steps + 1, error=str(error))
            self._record(status="provider_error", message=str(error)[:300])
            if self.provider_failures >= MAX_PROVIDER_FAILURES:
                raise ProviderFailed(f"the model provider failed {self.provider_failures} times in a row: {error}") from error
            raise CallFailed() from error
        self.provider_failures = 0
        response.text, response.refusal = clean_text(response.text), response.refusal and clean_text(response.refusal)
        response.thinking = response.thinking and clean_text(response.thinking)
        self.spend.add(response)  # only an answered call is a step
        self.log.info("model_response", step=self.spend.steps, finish_reason=response.finish_reason,
                      **response.usage.model_dump(), cost_usd=response.cost_usd, latency_s=response.latency_s)
        return response

    def _record(self, **fields: Any) -> None:
        """A step's record: where the run stands and what the step did (``on_step`` gets it)."""
        record = {**self.spend.progress(), **fields}
        self.records.append(record)
        self.on_step(record)

    def _stats(self) -> dict[str, Any]:
        """The trajectory's ``info`` beyond the exit (each mode adds its own)."""
        return {"model_stats": self.spend.model_stats(), "steps": self.records}

    def _save(self) -> None:
        self.trajectory.info.update(self._stats())
        self.trajectory.save(self.messages)
