"""What a batch is asked to do: a YAML file checked by pydantic, every mistake one clear line.

```yaml
models:                       # provider:model strings, or mappings with options
  - scripted:demo
  - baseline:reference
  - spec: openai:gpt-5
    label: gpt-5-high         # default: the spec
    options: {reasoning_effort: high}
problems: [all_reduce, "category:collective", "pkb:1", all]
samples: 3                    # episodes per (model, problem)
steps: 5                      # model calls per episode (mode single: 1)
mode: loop                    # loop | single (a Mode; more agent modes join the enum)
world: 2
device: cpu                   # cpu | cuda | emulate
allow_nccl: false
sandbox: local                # or {backend: docker, image: ...}
budget: {max_cost_usd: 2.0}   # per episode, agent.budget.Budget's fields
seed: 0
```
"""

from __future__ import annotations

import enum
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from agent.errors import UserError
from agent.run_config import SandboxSettings
from sandbox.harness.config import TIMING_PRECISION_HELP, DeviceMode


class Mode(str, enum.Enum):
    """How an episode is run; ``agent.batch.episode.RUNNERS`` maps each to its runner."""

    loop = "loop"      # the model revises a whole solution on the harness's feedback
    single = "single"  # one answer, judged once
    bash = "bash"      # the model works at a shell in the sandbox; its submission is judged at the end


class ModelEntry(BaseModel):
    """One contestant: a model spec, its provider options, the name it goes by in results."""

    model_config = ConfigDict(extra="forbid")

    spec: str = Field(description="provider:model, e.g. openai:gpt-5, scripted:demo, baseline:reference")
    label: str = Field("", description="the name in results and reports (default: the spec)")
    options: dict[str, Any] = Field(default_factory=dict, description="provider options (reasoning_effort, ...)")
    allow_nccl: bool | None = Field(None, description="override the batch's allow_nccl for this model "
                                    "(baseline:reference always calls NCCL: default true for it)")

    @model_validator(mode="after")
    def _defaults(self) -> ModelEntry:
        if ":" not in self.spec:
            raise ValueError(f"model {self.spec!r} is not provider:model (e.g. openai:gpt-5, scripted:demo, baseline:oracle)")
        self.label = self.label or self.spec
        if self.allow_nccl is None and self.spec == "baseline:reference":
            self.allow_nccl = True
        return self

    @property
    def provider(self) -> str:
        return self.spec.partition(":")[0].strip().lower()

    @property
    def is_baseline(self) -> bool:
        return self.provider == "baseline"


class RayOptions(BaseModel):
    """``--executor ray``: where the cluster is and what an episode's placement group holds."""

    model_config = ConfigDict(extra="forbid")

    address: str | None = Field(None, description="ray.init(address=...): 'auto', 'ray://host:10001', or None for a local instance")
    gpu_resource: str = Field("GPU", description="the resource an episode reserves once per GPU it needs")
    resources_per_rank: dict[str, float] = Field(default_factory=dict,
                                                 description="more resources reserved per rank (CI: a custom resource standing in for GPUs)")
    max_in_flight: int = Field(64, ge=1, description="episodes submitted to the cluster at once")


RESUMABLE = {"models", "problems", "samples", "workers", "gpus", "concurrency", "infra_retries", "max_cost_usd", "ray", "pkb_root"}


class BatchConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    models: list[ModelEntry] = Field(min_length=1)
    problems: list[str] = Field(min_length=1, description="names, category:<cat>, pkb:<id> (with pkb_root), or all")
    pkb_root: Path | None = None
    samples: int = Field(1, ge=1, le=1000)
    steps: int = Field(5, ge=1)
    mode: Mode = Mode.loop
    world: int = Field(2, ge=1, le=64)
    device: DeviceMode = "cpu"
    size: str | None = None
    trials: int = Field(5, ge=1, le=100)
    timed: bool | None = Field(None, description="time candidates against the reference (default: yes, except emulate)")
    timing_precision: float | None = Field(None, ge=0.0, le=1.0, description=TIMING_PRECISION_HELP)
    allow_nccl: bool = False
    sandbox: SandboxSettings = Field(default_factory=SandboxSettings)
    budget: dict[str, Any] = Field(default_factory=dict, description="per-episode budget: agent.budget.Budget's fields but steps")
    target_speedup: float | None = Field(None, gt=0, description="an episode stops once a correct solution is this much faster")
    examples: bool = True
    cheat_sheet: bool = True
    seed: int = 0
    workers: int | None = Field(None, ge=1, description="episodes at once (default: GPUs // GPUs per episode, 2 on cpu)")
    gpus: str | None = Field(None, description="GPUs the batch may use, e.g. 0,1,2,3 (default: all visible)")
    concurrency: dict[str, int] = Field(default_factory=dict,
                                        description="model calls at once per provider; 'default' for the rest (8)")
    infra_retries: int = Field(2, ge=0, le=10, description="times an episode hit by an infrastructure failure is run again")
    max_cost_usd: float | None = Field(None, gt=0, description="the batch's spend cap: no new episode starts past it")
    ray: RayOptions = Field(default_factory=RayOptions)

    @field_validator("models", mode="before")
    @classmethod
    def _strings_are_specs(cls, value: Any) -> Any:
        if isinstance(value, list):
            return [{"spec": item} if isinstance(item, str) else item for item in value]
        return value

    @field_validator("problems", mode="before")
    @classmethod
    def _one_problem_is_a_list(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value

    @field_validator("concurrency")
    @classmethod
    def _positive(cls, value: dict[str, int]) -> dict[str, int]:
        bad = [name for name, cap in value.items() if not isinstance(cap, int) or cap < 1]
        if bad:
            raise ValueError(f"concurrency caps must be whole numbers >= 1 ({', '.join(bad)})")
        return value

    @model_validator(mode="after")
    def _check(self) -> BatchConfig:
        labels = [m.label for m in self.models]
        repeated = sorted({label for label in labels if labels.count(label) > 1})
        if repeated:
            raise ValueError(f"model labels repeat ({', '.join(repeated)}): give each entry its own `label`")
        from agent.budget import Budget

        if "steps" in self.budget:
            raise ValueError("budget.steps: use the top-level `steps`")
        Budget(steps=self.steps, **self.budget)  # its own errors, early
        if self.mode is Mode.single:
            self.steps = 1
        return self

    def cap(self, provider: str) -> int:
        return self.concurrency.get(provider, self.concurrency.get("default", 8))

    def changed_fields(self, other: dict[str, Any]) -> list[str]:
        """The fields that make episodes differ between this config and ``other`` (a saved one):
        models, problems and samples may grow between runs of one batch folder, workers, caps
        and retries may change."""
        mine = self.model_dump(mode="json")
        return sorted(k for k in set(mine) | set(other) if k not in RESUMABLE and mine.get(k) != other.get(k))


def load_config(path: Path) -> BatchConfig:
    """The batch config in ``path``; a missing file, bad YAML or a bad field is a UserError
    naming the file and the field."""
    try:
        data = yaml.safe_load(Path(path).read_text())
    except FileNotFoundError:
        raise UserError(f"no batch config at {path}") from None
    except (OSError, UnicodeDecodeError) as error:
        raise UserError(f"cannot read {path}: {error}") from None
    except yaml.YAMLError as error:
        raise UserError(f"{path} is not valid YAML: {' '.join(str(error).split())}") from None
    return parse_config(data, str(path))


def parse_config(data: Any, where: str = "the batch config") -> BatchConfig:
    if not isinstance(data, dict):
        raise UserError(f"{where} must be a YAML mapping (models:, problems:, samples:, ...), not {type(data).__name__}")
    try:
        return BatchConfig.model_validate(data)
    except ValidationError as error:
        raise UserError(f"{where}: " + "; ".join(_describe(e) for e in error.errors())) from None


def _describe(error: dict[str, Any]) -> str:
    location = ".".join(str(part) for part in error["loc"])
    message = error["msg"].removeprefix("Value error, ")
    if error["type"] == "extra_forbidden":
        message = "unknown field (a typo?)"
    return f"{location or 'config'}: {message}"
