"""What a bash-mode episode is asked for, beside the run's budget and harness orders."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

Actions = Literal["tools", "text"]


class BashSettings(BaseModel):
    """The shell an episode's model works in."""

    actions: Actions = Field("tools", description="how the model is told to run commands: tools (a `bash` tool call) or text (one "
                             "```bash block per answer, for models without tool calls); answers of either kind are accepted")
    command_timeout_s: float = Field(300.0, gt=0, le=3600, description="wall-time limit of one command, kloop's commands included; "
                                     "on expiry the command and every process it started are killed")
    output_limit_chars: int = Field(10_000, ge=200, le=1_000_000, description="longer command outputs are cut to their head and tail")
    check_trials: int = Field(2, ge=1, le=20, description="correctness trials of `check` (public seeds)")
    public_seed: int = Field(1000, description="first public seed of `check`, `bench` and `profile` (the final judge's are hidden)")
