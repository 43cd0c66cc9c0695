"""Budgets of a run (steps, tokens, cost, wall time) and what has been spent."""

from __future__ import annotations

import time

from pydantic import BaseModel, Field

from agent.control import LimitsExceeded
from agent.providers import ModelResponse

WARN_FRACTION = 0.8


class Budget(BaseModel):
    """When a run stops: whichever limit is reached first."""

    steps: int = Field(10, ge=1, description="model calls")
    max_tokens: int | None = Field(None, ge=1, description="token budget for the run: input + output tokens over all calls")
    max_cost_usd: float | None = Field(None, gt=0, description="cost budget for the run, in USD")
    max_wall_s: float | None = Field(None, gt=0, description="wall-time budget for the run, in seconds")


class Spend(BaseModel):
    steps: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int = 0
    reasoning_tokens: int = 0
    cost_usd: float = 0.0
    cost_known: bool = True
    started_at: float = Field(default_factory=time.monotonic)

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    @property
    def known_cost_usd(self) -> float | None:
        """The cost so far, or None when a call's price was unknown."""
        return self.cost_usd if self.cost_known else None

    @property
    def wall_s(self) -> float:
        return time.monotonic() - self.started_at

    def add(self, response: ModelResponse) -> None:
        usage = response.usage
        self.input_tokens += usage.input_tokens
        self.output_tokens += usage.output_tokens
        self.cached_input_tokens += usage.cached_input_tokens
        self.reasoning_tokens += usage.reasoning_tokens
        if response.cost_usd is None:
            self.cost_known = False
        else:
            self.cost_usd += response.cost_usd


def check(budget: Budget, spend: Spend) -> None:
    """Raise :class:`LimitsExceeded` when any budget is spent."""
    if spend.steps >= budget.steps:
        raise LimitsExceeded(f"step limit of {budget.steps} reached")
    if budget.max_tokens is not None and spend.tokens >= budget.max_tokens:
        raise LimitsExceeded(f"token budget of {budget.max_tokens} spent ({spend.tokens} used)")
    if budget.max_cost_usd is not None and spend.cost_usd >= budget.max_cost_usd:
        raise LimitsExceeded(f"cost budget of ${budget.max_cost_usd:.2f} spent (${spend.cost_usd:.2f} used)")
    if budget.max_wall_s is not None and spend.wall_s >= budget.max_wall_s:
        raise LimitsExceeded(f"wall-time budget of {budget.max_wall_s:.0f} s spent")


def near_end(budget: Budget, spend: Spend) -> tuple[int, str] | None:
    """(steps left, why) when the run is close to a limit, else None."""
    steps_left = budget.steps - spend.steps
    reasons = []
    if budget.max_tokens is not None and spend.tokens >= WARN_FRACTION * budget.max_tokens:
        reasons.append(f"{spend.tokens} of {budget.max_tokens} tokens used")
    if budget.max_cost_usd is not None and spend.cost_usd >= WARN_FRACTION * budget.max_cost_usd:
        reasons.append(f"${spend.cost_usd:.2f} of ${budget.max_cost_usd:.2f} spent")
    if budget.max_wall_s is not None and spend.wall_s >= WARN_FRACTION * budget.max_wall_s:
        reasons.append(f"{spend.wall_s:.0f} of {budget.max_wall_s:.0f} s used")
    if steps_left <= 2 or reasons:
        return steps_left, "; ".join(reasons)
    return None
