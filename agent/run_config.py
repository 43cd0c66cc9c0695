"""Everything one run (or one evaluation) is asked to do, checked against the problem.

``harness_config(problem, ...)`` is the harness's orders for a loaded problem: a world size or a
size name the problem does not define is a UserError. ``SandboxSettings`` says where candidates
run and how many GPUs that takes (``sandbox.harness.config.gpus_needed``, the one place GPUs are
counted). ``RunConfig`` is what an agent run records in its ``config.json``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, Field, ValidationError, model_validator

from agent.bash.config import BashSettings
from agent.budget import Budget
from agent.errors import UserError
from sandbox.harness.config import HarnessConfig, gpus_needed

if TYPE_CHECKING:
    from problems.contract import Problem

RunMode = Literal["loop", "single", "bash"]


def check_world_size(problem: Problem, world: int) -> None:
    """``world`` must be one the problem declares, or 1 (single-GPU timing)."""
    if world not in (1, *problem.spec.world_sizes):
        raise UserError(f"{problem.name} is defined for world sizes {', '.join(map(str, problem.spec.world_sizes))} (and 1 for "
                        f"single-GPU timing), not {world}")


def harness_config(problem: Problem, **fields: Any) -> HarnessConfig:
    """The harness's orders for ``problem`` (a loaded Problem), ``fields`` being HarnessConfig's
    (world, device, size, trials, ...). Suite problems go by name, others (ParallelKernelBench's)
    by their ``ref``, which the harness and its ranks load again. A world size or a ``size`` the
    problem does not define is a UserError."""
    try:
        config = HarnessConfig(problem=problem.name, problem_ref=None if problem.ref.startswith("folder:") else problem.ref, **fields)
    except ValidationError as error:  # a caller's value the harness refuses (the CLI's, the API's, a batch config's)
        raise UserError("; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in error.errors())) from None
    check_world_size(problem, config.world)
    if config.size is not None and config.size not in problem.spec.shapes:
        raise UserError(f"{problem.name} has no size {config.size!r}; it has {', '.join(problem.spec.shapes)}")
    return config


def check_host_gpus(harness: HarnessConfig) -> None:
    """This machine has the GPUs ``harness`` needs (UserError saying what to do otherwise), asked
    without importing torch (1.5-3 s on a GPU host, in the CLI, before the harness imports it again):
    torch's build from its version file, the GPUs from NVML (which honours CUDA_VISIBLE_DEVICES)."""
    needed = gpus_needed(harness.device, harness.world)
    if not needed:
        return
    from sandbox.nvml import NvmlUnavailable, inventory

    built = torch_cuda_version()
    if built is None:
        raise UserError(f"--device {harness.device} needs a torch built with CUDA and this one has none (a CPU build); install a "
                        "CUDA build of torch, or use --device cpu")
    try:
        visible = len(inventory().gpus)
    except NvmlUnavailable:
        visible = 0
    if not visible:
        raise UserError(f"--device {harness.device} needs an NVIDIA GPU and this machine shows none (NVML, honouring "
                        "CUDA_VISIBLE_DEVICES); use --device cpu")
    if visible < needed:
        raise UserError(f"--device {harness.device} --world {harness.world} needs {needed} GPUs, this machine has {visible}; use "
                        f"--device emulate to run {harness.world} ranks on one GPU (correctness only)")


def torch_cuda_version() -> str | None:
    """The CUDA version torch was built with, or None for a CPU build: read from torch's
    ``version.py`` when it has the usual line, else from an imported torch."""
    import importlib.util
    import re

    spec = importlib.util.find_spec("torch")
    version_file = Path(spec.submodule_search_locations[0]) / "version.py" if spec and spec.submodule_search_locations else None
    text = version_file.read_text() if version_file and version_file.is_file() else ""
    found = re.search(r"^cuda\b[^=\n]*=\s*(?:'([^']*)'|\"([^\"]*)\"|(None))\s*$", text, re.MULTILINE)
    if found:
        return found.group(1) or found.group(2) or None
    import torch

    return torch.version.cuda


class SandboxSettings(BaseModel):
    """Where candidates are judged."""

    backend: str = Field("local", description="local (subprocess) or docker (container)")
    gpus: str | None = Field(None, description="GPUs the evaluations may use, e.g. 0,1,2,3 (default: the first they need)")
    image: str | None = Field(None, description="sandbox image for --sandbox docker (default: kernel-loop-sandbox:latest)")

    @model_validator(mode="before")
    @classmethod
    def _backend_name(cls, value: Any) -> Any:
        """A config may name just the backend (``sandbox: docker``)."""
        return {"backend": value} if isinstance(value, str) else value

    def backend_options(self, harness: HarnessConfig) -> dict[str, Any]:
        """Keyword arguments for ``sandbox.backends.open_sandbox(self.backend, ...)``: ``gpus``
        limits which GPUs may be used; an evaluation takes as many as ``harness`` needs."""
        from sandbox.gpu_pool import GpuPool, GpuPoolError, parse_gpu_ids

        try:
            ids = parse_gpu_ids(self.gpus)
        except GpuPoolError as error:
            raise UserError(str(error)) from None
        needed = gpus_needed(harness.device, harness.world)
        if ids and needed > len(ids):
            raise UserError(f"--device {harness.device} --world {harness.world} needs {needed} GPUs; --gpus {self.gpus} gives {len(ids)}")
        if self.backend == "local":
            if self.image:
                raise UserError("--image applies to --sandbox docker only")
            return {"env": {"CUDA_VISIBLE_DEVICES": ",".join(ids)}} if ids else {}
        if self.backend != "docker":
            return {}
        options: dict[str, Any] = {"image": self.image} if self.image else {}
        if needed:
            options.update(gpu_pool=GpuPool(ids), gpu_count=needed) if ids else options.update(gpu_count=needed)
        return options


class RunConfig(BaseModel):
    """One agent run. ``mode="single"`` is a one-step budget."""

    problem: str
    model: str = Field(description="provider:model, e.g. openai:gpt-5, anthropic:claude-sonnet-4-5, scripted:demo")
    model_options: dict[str, Any] = Field(default_factory=dict)
    mode: RunMode = Field("loop", description="loop: revise with feedback; single: one answer; bash: work at a shell in the sandbox")
    budget: Budget = Field(default_factory=Budget)
    target_speedup: float | None = Field(None, gt=0, description="stop once a correct solution is this much faster")
    harness: HarnessConfig
    sandbox: SandboxSettings = Field(default_factory=SandboxSettings)
    out: Path = Field(Path("runs"), description="run folders are made under this folder")
    pkb_root: Path | None = Field(None, description="ParallelKernelBench checkout for pkb:<id> problems (default: $KLOOP_PKB_ROOT)")
    examples: bool = Field(True, description="show oracle solutions of other problems as in-context examples (where there are some)")
    cheat_sheet: bool = Field(True, description="include the multi-GPU cheat sheet in the task prompt (GPU runs); off for zero-shot runs")
    bash: BashSettings = Field(default_factory=BashSettings, description="the shell of mode bash")

    @model_validator(mode="after")
    def _single_is_one_step(self) -> RunConfig:
        if self.mode == "single" and self.budget.steps != 1:
            self.budget = self.budget.model_copy(update={"steps": 1})
        return self

    @property
    def gpus_needed(self) -> int:
        return gpus_needed(self.harness.device, self.harness.world)
