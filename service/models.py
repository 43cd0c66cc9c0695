"""What the API accepts and answers (pydantic; the OpenAPI schema at /v1/openapi.json comes from these)."""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, field_validator

from agent.providers.scripted import SCRIPT_NAME
from sandbox.harness.config import TIMING_PRECISION_HELP, DeviceMode

# Provider options a client may set. Anything that could send the server's key elsewhere
# (api_key, base_url, default_headers, http_client, ...) or read the server's files is not one.
ALLOWED_MODEL_OPTIONS = frozenset({
    "max_output_tokens", "temperature", "top_p", "reasoning_effort", "seed", "max_tokens_param", "thinking_budget_tokens",
    "thinking", "cache_prompt", "cache_conversation", "deadline_s", "attempt_timeout_s", "max_attempts",
})
MODEL_SPEC = re.compile(r"^[a-z]+:[A-Za-z0-9_.:/@+-]{1,200}$")
NOT_OVER_API = ("replay",)  # replay:<path> reads a file of the server's (as scripted:<path> would: only its bare names pass)
ServiceRunMode = Literal["loop", "single"]  # bash mode (a shell in the sandbox) is not offered by the service yet


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class EvalRequest(Strict):
    """Judge one solution."""

    problem: str = Field(description="problem name (GET /v1/problems), or pkb:<id> where the server has a ParallelKernelBench checkout",
                         min_length=1, max_length=200)
    source: str = Field(description="the solution: a Python module defining solution(*inputs)", min_length=1)
    world: int = Field(2, ge=1, le=64, description="number of ranks")
    device: DeviceMode = Field("cpu", description="cpu (gloo), cuda (one GPU per rank) or emulate (all ranks on one GPU)")
    size: str | None = Field(None, description="named problem size (default: `default` in cuda mode, `small` otherwise)")
    allow_nccl: bool = Field(False, description="let the solution call torch.distributed collectives")
    trials: int = Field(5, ge=1, le=100, description="correctness trials with fresh seeds")
    timed: bool | None = Field(None, description="time reference and candidate (default: yes, except emulate)")
    timing_precision: float | None = Field(None, ge=0.0, le=1.0, description=TIMING_PRECISION_HELP)
    stress: int = Field(0, ge=0, le=10_000, description="back-to-back calls after correctness, every output checked")


class Budgets(Strict):
    """The run's budgets (agent.budget.Budget's names; the older max_tokens, max_cost_usd, max_wall_s are read too)."""

    max_run_tokens: int | None = Field(None, ge=1, validation_alias=AliasChoices("max_run_tokens", "max_tokens"),
                                       description="input + output tokens over the whole run")
    max_run_cost_usd: float | None = Field(None, gt=0, validation_alias=AliasChoices("max_run_cost_usd", "max_cost_usd"),
                                           description="cost budget of the run, in USD")
    max_run_wall_s: float | None = Field(None, gt=0, validation_alias=AliasChoices("max_run_wall_s", "max_wall_s"),
                                         description="wall-time budget of the run, in seconds")


class RunRequest(Strict):
    """An agent run: a model writes a solution, the harness judges it, the model revises."""

    problem: str = Field(min_length=1, max_length=200)
    model: str = Field(description="provider:model (openai:gpt-5, anthropic:claude-sonnet-4-5, scripted:demo, ...)")
    options: dict[str, Any] = Field(default_factory=dict, description=f"provider options: {', '.join(sorted(ALLOWED_MODEL_OPTIONS))}")
    mode: ServiceRunMode = Field("loop", description="loop: revise with feedback; single: one answer")
    steps: int = Field(10, ge=1, le=200, description="model calls")
    budgets: Budgets = Field(default_factory=Budgets)
    target_speedup: float | None = Field(None, gt=0, description="stop once a correct solution is this much faster")
    world: int = Field(2, ge=1, le=64)
    device: DeviceMode = "cpu"
    size: str | None = None
    trials: int = Field(5, ge=1, le=100)
    timed: bool | None = Field(None, description="time each correct answer against the reference (default: yes, except emulate)")
    timing_precision: float | None = Field(None, ge=0.0, le=1.0, description=TIMING_PRECISION_HELP)
    allow_nccl: bool = False
    examples: bool = Field(True, description="oracle solutions of other problems as in-context examples")
    cheat_sheet: bool = Field(True, description="the multi-GPU cheat sheet in the task prompt")

    @field_validator("model")
    @classmethod
    def _model_spec(cls, value: str) -> str:
        return check_model_spec(value)

    @field_validator("options")
    @classmethod
    def _options(cls, value: dict[str, Any]) -> dict[str, Any]:
        return check_model_options(value)


def check_model_spec(value: str) -> str:
    """A model a client may ask for (a run's, a batch's): ValueError with the reason when not."""
    if not MODEL_SPEC.match(value):
        raise ValueError("must be provider:model, e.g. openai:gpt-5 or scripted:demo")
    provider, _, name = value.partition(":")
    if provider in NOT_OVER_API:
        raise ValueError(f"{provider}: models are not offered over the API")
    if provider == "scripted" and (not SCRIPT_NAME.match(name) or name.endswith((".yaml", ".yml"))):
        raise ValueError("scripted: models over the API are the scripts the server ships, by name (scripted:demo), never a path")
    return value


def check_model_options(value: dict[str, Any]) -> dict[str, Any]:
    """Provider options a client may set: ValueError naming the others."""
    refused = sorted(set(value) - ALLOWED_MODEL_OPTIONS)
    if refused:
        raise ValueError(f"options {', '.join(refused)} are not accepted over the API (keys, endpoints and clients are the "
                         f"server's); allowed: {', '.join(sorted(ALLOWED_MODEL_OPTIONS))}")
    return value


class BatchRequest(Strict):
    """A batch: models x problems x samples (the config `kloop batch` reads, as JSON)."""

    config: dict[str, Any] = Field(description="the YAML config of `kloop batch` as JSON: models, problems, samples, steps, mode, "
                                               "world, device, allow_nccl, budget, ... (sandbox, gpus, ray and pkb_root are the server's)")


class Accepted(BaseModel):
    id: str = Field(description="the job's id: GET /v1/jobs/{id}, /v1/jobs/{id}/events")
    status: str
    created: bool = Field(description="false when an Idempotency-Key the token used before named this job")


class JobView(BaseModel):
    id: str
    kind: Literal["eval", "run", "batch"]
    status: Literal["queued", "running", "done", "failed", "cancelled", "interrupted"]
    title: str
    owner: str
    created_at: float
    started_at: float | None = None
    finished_at: float | None = None
    attempts: int = 0
    error: str | None = Field(None, description="why a failed job failed")
    result: Any = Field(None, description="eval: the EvalReport; run: the run's summary; batch: its summary.json (as `kloop batch` "
                                          "writes it; partial while it runs) with `progress`")
    request: dict[str, Any] | None = None


class ProblemView(BaseModel):
    name: str
    category: str
    pattern: str
    world_sizes: list[int]
    dtype: str
    sizes: list[str]
    description: str = ""
