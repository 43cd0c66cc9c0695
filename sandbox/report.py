"""EvalReport: the typed verdict of one evaluation, JSON-serialisable, units in field names."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from sandbox.harness.config import DeviceMode

Status = Literal["correct", "wrong", "build_failed", "crashed", "timeout", "rejected"]
STATUSES: tuple[str, ...] = Status.__args__  # type: ignore[attr-defined]
Stage = Literal["static", "build", "correctness", "stress", "performance", "recheck", "profile", "done"]


class ReportModel(BaseModel):
    """Non-finite floats (a candidate's NaN or inf output, an error that is inf) go to JSON as
    "NaN" / "Infinity" strings: strict JSON that reads back as the same float."""

    model_config = ConfigDict(ser_json_inf_nan="strings")


class Mismatch(ReportModel):
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


class RankVerdict(ReportModel):
    rank: int
    ok: bool
    message: str = ""
    max_abs_err: float = 0.0
    max_rel_err: float = 0.0


class Timing(ReportModel):
    """Per-iteration times on every rank; the step time is the slowest rank's median."""

    median_ms: float
    iqr_ms: float
    min_ms: float
    per_rank_median_ms: list[float]
    iterations: int
    warmup: int
    input_sets: int
    sync_overhead_ms: float = Field(0.0, description="an empty timed interval (barrier, sync, events), measured before the "
                                                     "candidate was loaded and subtracted from each call; the slowest rank's")
    rounds: int = Field(0, description="timed rounds, interleaved with the other group's on the same inputs")
    l2_policy: str = Field("", description="what the L2 cache held when a timed call started")


ActivityKind = Literal["communication", "compute", "custom", "copy", "other"]


class KernelStat(ReportModel):
    """One kernel (or memcpy / memset) name's device time over the profiled calls."""

    name: str
    calls: int
    total_us: float
    share: float = Field(description="fraction of all device time in the profiled window")
    kind: ActivityKind = Field("custom", description="communication: NCCL, peer memcpy, torch symmetric-memory kernels; compute: "
                               "GEMM libraries; copy: memcpy/memset (local or through symmetric buffers); other: torch's own "
                               "kernels; custom: everything else (the solution's own kernels)")


class ProfileSummary(ReportModel):
    """A few calls of one rank under the profiler. Per-call times are the profiled totals
    divided by the number of calls; ``busy`` counts overlapping activity once."""

    device_total_us: float
    iterations: int
    kernels: list[KernelStat]
    rank: int = 0
    wall_us_per_call: float | None = Field(None, description="host-measured call + device sync, under the profiler")
    busy_us_per_call: float | None = Field(None, description="time any kernel or copy ran (union over streams)")
    communication_us_per_call: float = 0.0
    compute_us_per_call: float = 0.0
    custom_us_per_call: float = 0.0
    copy_us_per_call: float = 0.0
    other_us_per_call: float = 0.0


CONTROL_CHARACTERS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def inert(text: str) -> str:
    """``text`` with every control character (but newline and tab) written out as ``\\xNN``."""
    return CONTROL_CHARACTERS.sub(lambda match: f"\\x{ord(match.group(0)):02x}" if ord(match.group(0)) < 256
                                  else f"\\u{ord(match.group(0)):04x}", text)


def head_and_tail(head: str, tail: str, elided_chars: int) -> str:
    """A cut text as shown: its head, a marker saying how many characters were left out, its tail."""
    if not elided_chars:
        return head
    return f"{head}\n[... {elided_chars} characters elided ...]\n{tail}"


class LogExcerpt(ReportModel):
    name: str
    head: str
    tail: str = ""
    elided_chars: int = 0

    @classmethod
    def of(cls, name: str, text: str, keep_chars: int = 4000) -> LogExcerpt:
        """Head and tail of ``text``, its control characters made visible (a log is shown, never
        obeyed: no terminal escapes, no carriage returns that overwrite a line)."""
        if len(text) <= 2 * keep_chars:
            return cls(name=name, head=inert(text))
        return cls(name=name, head=inert(text[:keep_chars]), tail=inert(text[-keep_chars:]), elided_chars=len(text) - 2 * keep_chars)

    def text(self) -> str:
        return head_and_tail(self.head, self.tail, self.elided_chars)


class Roofline(ReportModel):
    bound_ms: float = Field(description="the fastest a solution could run on this topology")
    limiter: Literal["interconnect", "hbm", "compute"]
    comm_bytes_per_rank: float
    flops_per_rank: float
    hbm_bytes_per_rank: float
    link_gbps: float
    hbm_gbps: float
    tflops: float
    link_measured: bool = Field(False, description="link_gbps was measured on this host (else datasheet)")
    hbm_measured: bool = Field(False, description="hbm_gbps was measured on this host (else datasheet)")


Bottleneck = Literal["interconnect", "hbm", "compute", "host_overhead", "serialised", "latency"]


class PerformanceAnalysis(ReportModel):
    """Where one call's time goes against the roofline: achieved rates per resource, the
    profile's split into communication / compute / custom kernels / idle, and what bounds it.
    Rates are per rank; ``*_fraction`` is achieved over available."""

    call_ms: float = Field(description="the timed call (slowest rank's median)")
    roofline_ms: float
    roofline_fraction: float = Field(description="roofline_ms / call_ms")
    comm_bytes_per_rank: float
    hbm_bytes_per_rank: float
    flops_per_rank: float
    achieved_comm_gbps: float | None = None
    link_gbps: float
    link_fraction: float | None = None
    achieved_hbm_gbps: float | None = None
    hbm_gbps: float
    hbm_fraction: float | None = None
    achieved_tflops: float | None = None
    tflops: float
    compute_fraction: float | None = None
    link_measured: bool = False
    hbm_measured: bool = False
    profiled_rank: int | None = None
    busy_ms: float | None = Field(None, description="device busy per call, from the profile")
    idle_ms: float | None = Field(None, description="call_ms - busy_ms: host overhead, launch gaps, serialisation")
    idle_fraction: float | None = None
    communication_ms: float | None = None
    compute_ms: float | None = None
    custom_ms: float | None = None
    copy_ms: float | None = None
    other_ms: float | None = None
    overlap_ms: float | None = Field(None, description="kernel time that ran concurrently with other kernel time")
    bottleneck: Bottleneck | None = None
    busiest_resource: Literal["interconnect", "hbm", "compute"] | None = None
    busiest_fraction: float | None = None


class ClockCheck(ReportModel):
    """The candidate's claimed times against the harness's own clock (see sandbox/harness/timing.py)."""

    candidate_unclaimed_ms: float = Field(description="median per call: the parent's wall time minus the slowest rank's claim")
    reference_unclaimed_ms: float = Field(description="the same for the reference: the harness's own cost of a call")
    allowed_excess_ms: float
    candidate_staging_ms: float = Field(description="median per call of staging a round's inputs")
    reference_staging_ms: float
    allowed_staging_excess_ms: float
    clock_estimate_ms: float = Field(description="the call's time by the harness's clock: median wall time less the reference's "
                                                 "harness cost")
    clock_floor_ms: float = Field(description="the least time per call the harness's clock allows: the estimate less its "
                                              "uncertainty, or (when only the allowance for process groups that differ let the "
                                              "check pass) the estimate itself, plus any staging time beyond the noise")
    harness_offset_ms: float = Field(0.0, description="how much more the harness's own work in a call surely cost in the "
                                                      "candidate's processes than in the reference's (negative: less), measured "
                                                      "before candidate code ran")
    staging_offset_ms: float = Field(0.0, description="the same for staging a call's inputs, where it cost more (else 0)")


class CompileStats(ReportModel):
    """What the ranks asked the harness to compile during this evaluation."""

    requests: int = 0
    distinct: int = Field(0, description="distinct sources (each built at most once, or taken from the cache)")
    failed: int = 0


class EvalReport(ReportModel):
    status: Status
    message: str = Field(description="one line saying why")
    stage: Stage = "static"
    problem: str
    world: int
    device: DeviceMode
    dtype: str
    size: str
    trials: int = 0
    public_seeds: list[int] = Field(default_factory=list)
    ranks: list[RankVerdict] = Field(default_factory=list)
    mismatch: Mismatch | None = None
    reference_timing: Timing | None = None
    reference_alone_ms: float | None = Field(None, description="the reference's median call timed alone, before any "
                                             "candidate code ran; the speedup is taken against it when the reference ran "
                                             "much slower beside the candidate")
    reference_alone_age_s: float | None = Field(None, description="how long before this evaluation's build stage the "
                                                "reference's time alone was measured, where a long-lived harness's kept "
                                                "reference group had it from an earlier evaluation; None: measured in this one")
    reference_device_ms: float | None = Field(None, description="the reference's median call on the device alone, its launch "
                                              "hidden behind the L2 flushes (a GPU only): the timed calls also hold the host's "
                                              "launch and sync, which for a short call can be most of it")
    candidate_timing: Timing | None = None
    speedup: float | None = Field(None, description="reference median / candidate median; only on correct reports")
    speedup_ci: list[float] | None = Field(None, description="95% bootstrap interval of the speedup over the timed rounds")
    timing_check: ClockCheck | None = None
    roofline: Roofline | None = None
    roofline_fraction: float | None = None
    achieved_comm_gbps: float | None = None
    profile: ProfileSummary | None = None
    reference_profile: ProfileSummary | None = None
    analysis: PerformanceAnalysis | None = None
    reference_analysis: PerformanceAnalysis | None = None
    build_log: LogExcerpt | None = None
    compiles: CompileStats = Field(default_factory=CompileStats)
    logs: list[LogExcerpt] = Field(default_factory=list)
    stage_wall_s: dict[str, float] = Field(default_factory=dict)
    harness_breakdown_s: dict[str, float] = Field(default_factory=dict, description="where the harness's time went: "
                                                  "each group's commands by type (asked to answered) and the parent's own work")
    wall_s: float = 0.0
    profile_cache: Literal["hit", "miss", "off"] = Field("off", description="profiles of this solution and of the reference "
                                                         "taken before on this host (sealed with the host secret)")
    isolation: list[str] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)

    @property
    def correct(self) -> bool:
        return self.status == "correct"
