"""Budgets of a run (steps, tokens, cost, wall time) and what has been spent.

These are whole-run budgets (``--max-run-tokens``, ``--max-run-cost``, ``--max-run-wall``); the
cap on one call's output is a model option (``--max-output-tokens``, ``max_output_tokens``)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from pydantic import AliasChoices, BaseModel, Field

from agent.control import LimitsExceeded

if TYPE_CHECKING:
    from agent.providers import ModelResponse

WARN_FRACTION = 0.8


class Budget(BaseModel):
    """When a run stops: whichever limit is reached first. (The older names ``max_tokens``,
    ``max_cost_usd`` and ``max_wall_s`` are still read.)"""

    steps: int = Field(10, ge=1, description="model calls (answers) of the run")
    max_run_tokens: int | None = Field(None, ge=1, validation_alias=AliasChoices("max_run_tokens", "max_tokens"),
                                       description="token budget for the whole run: input + output tokens over all calls")
    max_run_cost_usd: float | None = Field(None, gt=0, validation_alias=AliasChoices("max_run_cost_usd", "max_cost_usd"),
                                           description="cost budget for the whole run, in USD")
    max_run_wall_s: float | None = Field(None, gt=0, validation_alias=AliasChoices("max_run_wall_s", "max_wall_s"),
                                         description="wall-time budget for the whole run, in seconds (cuts a model call "
                                                     "that would run past it)")


class Spend(BaseModel):
    """What a run has used. ``steps`` counts answered model calls; ``failed_calls`` the calls that
    got no answer. ``unknown_usage_calls`` answered without saying their tokens (so their cost is
    unknown too); ``unpriced_calls`` came from a model without a price."""

    steps: int = 0
    failed_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int = 0
    reasoning_tokens: int = 0
    cost_usd: float = 0.0
    unknown_usage_calls: int = 0
    unpriced_calls: int = 0
    started_at: float = Field(default_factory=time.monotonic)

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    @property
    def cost_known(self) -> bool:
        return not (self.unknown_usage_calls or self.unpriced_calls)

    @property
    def known_cost_usd(self) -> float | None:
        """The cost so far, or None when some call's cost is unknown."""
        return self.cost_usd if self.cost_known else None

    @property
    def wall_s(self) -> float:
        return time.monotonic() - self.started_at

    def progress(self) -> dict[str, Any]:
        """Where the run stands, as each step's record starts: step, tokens, cost (None when
        unknown) and wall time."""
        return {"step": self.steps, "tokens": self.tokens, "cost_usd": self.known_cost_usd, "wall_s": round(self.wall_s, 1)}

    def model_stats(self) -> dict[str, Any]:
        """The spend as a trajectory's ``info.model_stats`` (mini-swe-agent's ``instance_cost``
        and ``api_calls``, with our token counts and whether the cost is known)."""
        return {"instance_cost": self.cost_usd, "cost_known": self.cost_known, "api_calls": self.steps,
                "failed_calls": self.failed_calls, "input_tokens": self.input_tokens, "output_tokens": self.output_tokens,
                "cached_input_tokens": self.cached_input_tokens, "reasoning_tokens": self.reasoning_tokens,
                "unknown_usage_calls": self.unknown_usage_calls}

    def deadline(self, budget: Budget) -> float | None:
        """The ``time.monotonic()`` instant the run's wall-time budget ends (None: no budget)."""
        return None if budget.max_run_wall_s is None else self.started_at + budget.max_run_wall_s

    def add(self, response: ModelResponse) -> None:
        """Count an answered call: one step, its tokens and its cost."""
        usage = response.usage
        self.steps += 1
        self.input_tokens += usage.input_tokens
        self.output_tokens += usage.output_tokens
        self.cached_input_tokens += usage.cached_input_tokens
        self.reasoning_tokens += usage.reasoning_tokens
        if not usage.reported:
            self.unknown_usage_calls += 1
        elif response.cost_usd is None:
            self.unpriced_calls += 1
        if response.cost_usd is not None:
            self.cost_usd += response.cost_usd


def check(budget: Budget, spend: Spend) -> None:
    """Raise :class:`LimitsExceeded` when any budget is spent. A token or cost budget cannot be
    kept once a call answered without its usage: the run ends then (the safe side)."""
    if spend.steps >= budget.steps:
        raise LimitsExceeded(f"step limit of {budget.steps} reached")
    if spend.unknown_usage_calls and (budget.max_run_tokens is not None or budget.max_run_cost_usd is not None):
        which = "token" if budget.max_run_cost_usd is None else "cost"
        raise LimitsExceeded(f"{which} budget cannot be kept: the provider did not report the token usage of "
                             f"{spend.unknown_usage_calls} call{'s' if spend.unknown_usage_calls != 1 else ''}, so the spend is unknown")
    if budget.max_run_tokens is not None and spend.tokens >= budget.max_run_tokens:
        raise LimitsExceeded(f"token budget of {budget.max_run_tokens} spent ({spend.tokens} used)")
    if budget.max_run_cost_usd is not None and spend.cost_usd >= budget.max_run_cost_usd:
        raise LimitsExceeded(f"cost budget of ${budget.max_run_cost_usd:.2f} spent (${spend.cost_usd:.2f} used)")
    if budget.max_run_wall_s is not None and spend.wall_s >= budget.max_run_wall_s:
        raise LimitsExceeded(f"wall-time budget of {budget.max_run_wall_s:g} s spent")


def near_end(budget: Budget, spend: Spend) -> tuple[int, str] | None:
    """(steps left, why) when the run is close to a limit, else None."""
    steps_left = budget.steps - spend.steps
    reasons = []
    if budget.max_run_tokens is not None and spend.tokens >= WARN_FRACTION * budget.max_run_tokens:
        reasons.append(f"{spend.tokens} of {budget.max_run_tokens} tokens used")
    if budget.max_run_cost_usd is not None and spend.cost_usd >= WARN_FRACTION * budget.max_run_cost_usd:
        reasons.append(f"${spend.cost_usd:.2f} of ${budget.max_run_cost_usd:.2f} spent")
    if budget.max_run_wall_s is not None and spend.wall_s >= WARN_FRACTION * budget.max_run_wall_s:
        reasons.append(f"{spend.wall_s:.0f} of {budget.max_run_wall_s:.0f} s used")
    if steps_left <= 2 or reasons:
        return steps_left, "; ".join(reasons)
    return None
