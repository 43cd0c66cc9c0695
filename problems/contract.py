"""The problem contract: what a problem is (:class:`Problem`), its static description
(:class:`ProblemSpec`) and its cost model (:class:`Cost`).

A problem lives in ``problems/<category>/<name>/``:

- ``reference.py`` defines ``solution(*inputs)``, the PyTorch + torch.distributed program the
  model sees. It runs on every rank.
- ``problem.py`` defines ``SPEC`` (a :class:`ProblemSpec`), ``make_inputs(rank, world,
  generator, device, dtype, **shape)`` (and ``regime=`` when ``SPEC.regimes`` > 1) and
  ``cost(world, dtype_bytes, **shape) -> Cost``
  (helpers for writing them: :mod:`problems.authoring`).
- optionally ``oracle.py``: a hand-written fast solution.

Loading one: :mod:`problems.loader`; finding one by name: :mod:`problems.registry`.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
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
    sum_of_products: bool = Field(False, description=(
        "every output element is a sum over ranks of products of input elements with nonnegative weights (copies, sums, "
        "averages, matrix products accumulated in fp32; no subtraction, division by data or other function), so the "
        "reference run on the inputs' magnitudes bounds what rounding can do to each element: world + 1 roundings in the "
        "problem's dtype (a partial product per rank, then the sums over ranks, in any order) stay inside twice that "
        "(sandbox/harness/compare.py). The judge holds every element to it, which a lossy transfer (block-scaled int8, "
        "fp8) breaks on elements much smaller than their neighbours"))
    regimes: int = Field(1, ge=1, le=16, description=(
        "input regimes make_inputs draws from (its keyword ``regime``, 0 to regimes-1): branches or value ranges the reference "
        "handles differently, such as clipping active or not. The judge cycles through them, so the correctness trials cover "
        "every one: a solution right only in the regime that random draws favour is not judged correct"))
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

    def cost_at(self, world: int, size: str = "default", dtype: str | None = None) -> Cost:
        """The cost model at a named size, in the problem's dtype unless another is given."""
        return self.cost(world, DTYPE_BYTES[dtype or self.spec.dtype], **self.shape(size))

    def inputs(self, rank: int, world: int, generator: Any, device: Any, dtype: Any, shape: dict[str, Any],
               regime: int = 0) -> tuple:
        """``make_inputs`` at ``shape`` (a size's keyword arguments), in input regime ``regime``
        where the problem declares several."""
        options = {**shape, "regime": regime} if self.spec.regimes > 1 else shape
        return tuple(self.make_inputs(rank, world, generator, device, dtype, **options))

    def shape(self, size: str) -> dict[str, Any]:
        if size not in self.spec.shapes:
            raise KeyError(f"problem {self.name} has no size {size!r}; it has {sorted(self.spec.shapes)}")
        return dict(self.spec.shapes[size])


class UnknownProblem(LookupError):
    """No problem of that name; the message lists the closest names."""
