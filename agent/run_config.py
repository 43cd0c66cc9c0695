"""Everything one run is asked to do."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from agent.budget import Budget
from sandbox.harness.config import HarnessConfig


class RunConfig(BaseModel):
    problem: str
    model: str = Field(description="provider:model, e.g. openai:gpt-5, anthropic:claude-sonnet-4-5, scripted:demo")
    model_options: dict[str, Any] = Field(default_factory=dict)
    mode: Literal["loop", "single"] = "loop"
    budget: Budget = Field(default_factory=Budget)
    target_speedup: float | None = Field(None, description="stop once a correct solution is this much faster")
    harness: HarnessConfig
    sandbox: str = "local"
    out: Path = Path("runs")
    examples: bool = Field(True, description="show oracle solutions of other problems as in-context examples (where there are some)")
    cheat_sheet: bool = Field(True, description="include the multi-GPU cheat sheet in the task prompt (GPU runs); off for zero-shot runs")
