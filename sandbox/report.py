"""EvalReport: the typed verdict of one evaluation, JSON-serialisable, units in field names."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

Status = Literal["correct", "wrong", "build_failed", "crashed", "timeout", "rejected"]
STATUSES: tuple[str, ...] = Status.__args__  # type: ignore[attr-defined]
Stage = Literal["static", "build", "correctness", "stress", "performance", "recheck", "profile", "done"]


class Mismatch(BaseModel):
    """Where and by how much one output of one rank missed the reference."""

    rank: int
    trial: int
    output_index: int = 0
    kind: Literal["shape", "dtype", "values", "nan", "input_modified", "type"] = "values"
    detail: str = ""
    numel: int = 0
    mismatched: int = 0
    nans: int = 0
    max_abs_err: float = 0.0
    max_rel_err: float = 0.0
    rms_err: float = 0.0
    rms_bound: float = 0.0
    worst_index: list[int] = Field(default_factory=list)
    worst_expected: float = 0.0
    worst_got: float = 0.0
    worst_bound: float = 0.0
    reference_max_abs_err: float = Field(0.0, description="how far the native-precision reference is from the upcast one")


class RankVerdict(BaseModel):
    rank: int
    ok: bool
    message: str = ""
    max_abs_err: float = 0.0
    max_rel_err: float = 0.0


class Timing(BaseModel):
    """Per-iteration times on every rank; the step time is the slowest rank's median."""

    median_ms: float
    iqr_ms: float
    min_ms: float
    per_rank_median_ms: list[float]
    iterations: int
    warmup: int
    input_sets: int


class KernelStat(BaseModel):
    name: str
    calls: int
    total_us: float
    share: float = Field(description="fraction of all device time in the profiled window")


class ProfileSummary(BaseModel):
    device_total_us: float
    iterations: int
    kernels: list[KernelStat]


class LogExcerpt(BaseModel):
    name: str
    head: str
    tail: str = ""
    elided_chars: int = 0

    @classmethod
    def of(cls, name: str, text: str, keep_chars: int = 4000) -> "LogExcerpt":
        if len(text) <= 2 * keep_chars:
            return cls(name=name, head=text)
        return cls(name=name, head=text[:keep_chars], tail=text[-keep_chars:], elided_chars=len(text) - 2 * keep_chars)

    def text(self) -> str:
        if not self.elided_chars:
            return self.head
        return f"{self.head}\n[... {self.elided_chars} characters elided ...]\n{self.tail}"


class Roofline(BaseModel):
    bound_ms: float = Field(description="the fastest a solution could run on this topology")
    limiter: Literal["interconnect", "hbm", "compute"]
    comm_bytes_per_rank: float
    flops_per_rank: float
    hbm_bytes_per_rank: float
    link_gbps: float
    hbm_gbps: float
    tflops: float


class CompileStats(BaseModel):
    """What the ranks asked the harness to compile during this evaluation."""

    requests: int = 0
    distinct: int = Field(0, description="distinct sources (each built at most once, or taken from the cache)")
    failed: int = 0


class EvalReport(BaseModel):
    status: Status
    message: str = Field(description="one line saying why")
    stage: Stage = "static"
    problem: str
    world: int
    device: Literal["cpu", "cuda", "emulate"]
    dtype: str
    size: str
    trials: int = 0
    public_seeds: list[int] = Field(default_factory=list)
    ranks: list[RankVerdict] = Field(default_factory=list)
    mismatch: Mismatch | None = None
    reference_timing: Timing | None = None
    candidate_timing: Timing | None = None
    speedup: float | None = None
    roofline: Roofline | None = None
    roofline_fraction: float | None = None
    achieved_comm_gbps: float | None = None
    profile: ProfileSummary | None = None
    build_log: LogExcerpt | None = None
    compiles: CompileStats = Field(default_factory=CompileStats)
    logs: list[LogExcerpt] = Field(default_factory=list)
    stage_wall_s: dict[str, float] = Field(default_factory=dict)
    wall_s: float = 0.0
    reference_cache: Literal["hit", "miss", "off"] = "off"
    isolation: list[str] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)

    @property
    def correct(self) -> bool:
        return self.status == "correct"
