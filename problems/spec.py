"""The problem contract: metadata, input generator and cost model of one problem.

A problem lives in ``problems/<category>/<name>/``:

- ``reference.py`` defines ``solution(*inputs)``, the PyTorch + torch.distributed program the
  model sees. It runs on every rank.
- ``problem.py`` defines ``SPEC`` (a :class:`ProblemSpec`), ``make_inputs(rank, world,
  generator, device, dtype, **shape)`` and ``cost(world, dtype_bytes, **shape) -> Cost``.
- optionally ``oracle.py``: a hand-written fast solution.
"""

from __future__ import annotations

import importlib.util
import hashlib
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

# "uncategorized": problems loaded from an outside suite (``problems.pkb``) whose category cannot be
# told reliably from what the suite says about them; suite folders never use it.
Category = Literal["collective", "tp", "sp", "cp", "ep", "dp", "fsdp", "pp", "lowprec", "domain", "uncategorized"]
CATEGORIES: tuple[str, ...] = Category.__args__  # type: ignore[attr-defined]

DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4, "float64": 8}
DTYPES = tuple(DTYPE_BYTES)


class Cost(BaseModel):
    """What one rank must do at the least, per call: the roofline's inputs."""

    model_config = ConfigDict(frozen=True)

    comm_bytes: float = Field(0.0, description="bytes this rank must send over the interconnect")
    flops: float = Field(0.0, description="floating-point operations on this rank")
    hbm_bytes: float = Field(0.0, description="bytes this rank must read and write in its own HBM")


class ProblemSpec(BaseModel):
    """Static description of a problem. Shapes are named sets of keyword arguments for
    ``make_inputs`` and ``cost``: ``default`` is the size timed on GPUs, ``small`` the size used
    on CPU (tests, demos, emulation)."""

    model_config = ConfigDict(frozen=True)

    name: str
    category: Category
    pattern: str = Field(description="the communication pattern, in a few words")
    origin: str = Field(description="the real code base this pattern comes from")
    world_sizes: tuple[int, ...] = (2, 4, 8)
    dtype: str = "bfloat16"
    atol: float = Field(0.0, ge=0, description="absolute tolerance floor against the fp32/fp64 reference")
    rtol: float = Field(0.0, ge=0, description="relative tolerance floor against the fp32/fp64 reference")
    upcast: bool = Field(True, description="judge against the reference run on upcast inputs")
    in_place: bool = Field(False, description="the solution may modify its inputs")
    shapes: dict[str, dict[str, Any]]
    description: str = ""

    @field_validator("name")
    @classmethod
    def _name_is_identifier(cls, v: str) -> str:
        if not v.replace("_", "").isalnum() or not v[0].isalpha():
            raise ValueError(f"problem name {v!r} must be a lowercase identifier, not a number")
        return v

    @field_validator("dtype")
    @classmethod
    def _known_dtype(cls, v: str) -> str:
        if v not in DTYPES:
            raise ValueError(f"dtype {v!r} is not one of {DTYPES}")
        return v

    @field_validator("shapes")
    @classmethod
    def _has_default_and_small(cls, v: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        missing = {"default", "small"} - set(v)
        if missing:
            raise ValueError(f"shapes must name {sorted(missing)}")
        return v


@dataclass(frozen=True)
class Problem:
    """A loaded problem: its spec, its functions and where its files are.

    Suite problems keep everything in ``folder``; a problem loaded from an outside suite
    (``problems.pkb``) names its reference file, the files its version hash covers, and the
    compatibility layer its candidates were written against."""

    spec: ProblemSpec
    folder: Path
    make_inputs: Callable[..., tuple]
    cost: Callable[..., Cost]
    ref: str = ""  # how a rank process loads the same problem again (see problems.registry.load_ref)
    reference_file: Path | None = None  # default: folder/reference.py
    source_files: tuple[Path, ...] = ()  # what source_hash covers; default: folder/problem.py and the reference
    reference_sys_path: tuple[Path, ...] = ()  # put first on sys.path of reference ranks (never of candidate ranks)
    compat: str = ""  # "pkb": candidates are written for ParallelKernelBench; the harness gives them its import shims

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def reference_path(self) -> Path:
        return self.reference_file or self.folder / "reference.py"

    @property
    def oracle_path(self) -> Path | None:
        if self.reference_file is not None:
            return None
        path = self.folder / "oracle.py"
        return path if path.exists() else None

    @property
    def reference_source(self) -> str:
        return self.reference_path.read_text()

    def source_hash(self) -> str:
        """Changes whenever the reference or the input generator changes (cache key)."""
        digest = hashlib.sha256()
        for path in self.source_files or (self.folder / "problem.py", self.reference_path):
            digest.update(path.read_bytes())
        return digest.hexdigest()[:16]

    def input_signature(self, world: int, size: str, dtype: str) -> list[str] | None:
        """``["bfloat16[33554432]", ...]`` for rank 0's inputs, without allocating them (None if
        the generator cannot run on fake tensors, e.g. data-dependent shapes)."""
        import torch
        from torch._subclasses.fake_tensor import FakeTensorMode

        try:
            with FakeTensorMode():
                generator = torch.Generator().manual_seed(0)
                inputs = self.make_inputs(0, world, generator, torch.device("cpu"), getattr(torch, dtype), **self.shape(size))
        except Exception:  # noqa: BLE001 - best effort: the prompt then shows the shape parameters only
            return None
        return [describe_input(x) for x in inputs]

    def cost_at(self, world: int, size: str = "default", dtype: str | None = None) -> Cost:
        """The cost model at a named size, in the problem's dtype unless another is given."""
        return self.cost(world, DTYPE_BYTES[dtype or self.spec.dtype], **self.shape(size))

    def shape(self, size: str) -> dict[str, Any]:
        if size not in self.spec.shapes:
            raise KeyError(f"problem {self.name} has no size {size!r}; it has {sorted(self.spec.shapes)}")
        return dict(self.spec.shapes[size])


def describe_input(x) -> str:
    """``bfloat16[4, 8]`` for a tensor, the same inside lists and tuples, ``repr`` for the rest."""
    import torch

    if isinstance(x, torch.Tensor):
        return f"{str(x.dtype).removeprefix('torch.')}{list(x.shape)}"
    if isinstance(x, (list, tuple)) and not isinstance(x, torch.Size):
        inner = ", ".join(describe_input(item) for item in x)
        return f"[{inner}]" if isinstance(x, list) else f"({inner}{',' if len(x) == 1 else ''})"
    return repr(x)


def rank_generator(generator, rank: int):
    """A generator for this rank's own data, derived from the trial's shared generator.

    The harness seeds ``generator`` identically on every rank (so ranks can draw shared data
    such as routing tables); per-rank data comes from this one."""
    import torch

    derived = torch.Generator(device=generator.device)
    derived.manual_seed((generator.initial_seed() * 0x9E3779B97F4A7C15 + 7919 * (rank + 1)) % 2**63)
    return derived


def randn(shape, generator, device, dtype, scale: float = 1.0, mean: float = 0.0):
    """Normal values drawn in fp32 (identical whatever the target dtype), then cast."""
    import torch

    values = torch.randn(shape, generator=generator, device=device, dtype=torch.float32)
    return (values * scale + mean).to(dtype)


def topk_routing(generator, popularity, tokens: int, top_k: int):
    """A top-k router's choices for ``tokens`` tokens: fp32 logits drawn from ``generator`` plus
    the shared per-expert bias ``popularity`` ([experts]), then the top_k experts of each token.
    Returns the expert ids ([tokens, top_k], int64) and their gate probabilities (the softmax of
    the top_k logits, fp32, as routers compute it)."""
    import torch

    experts = popularity.shape[0]
    router_logits = torch.randn((tokens, experts), generator=generator, device=popularity.device) + popularity
    top_logits, expert_index = router_logits.topk(top_k, dim=-1)
    return expert_index, torch.softmax(top_logits, dim=-1)


def adam_hparams(generator, device):
    """Hyper-parameters of the optimizer problems: [lr, beta1, beta2, eps, weight_decay] (fp32)
    and the step count, drawn per call from the shared generator (the same on every rank)."""
    import torch

    u = torch.rand(6, generator=generator, device=device, dtype=torch.float64)
    hparams = torch.stack((10 ** (-4 + u[0]), 0.85 + 0.1 * u[1], 0.95 + 0.049 * u[2], 10 ** (-8 + 2 * u[3]), 0.1 * u[4]))
    return hparams.to(torch.float32), (1 + 300 * u[5]).to(torch.int64)  # early steps, where bias correction matters


def load_module(path: Path, module_name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load_problem(folder: Path) -> Problem:
    module = load_module(folder / "problem.py", f"kloop_problem_{folder.name}")
    return Problem(spec=module.SPEC, folder=folder, make_inputs=module.make_inputs, cost=module.cost, ref=f"folder:{folder}")
