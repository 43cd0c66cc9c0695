"""Where the time of a call goes: device activity classified and summed per call, and the
call weighed against the roofline (achieved rates, idle time, what bounds it).

Pure functions on plain data, so they run (and are tested) without a GPU; the profiler side
is in :mod:`sandbox.rank.server` (the ranks profile their calls; the parent summarises).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable

from sandbox.report import PerformanceAnalysis, ProfileSummary, Roofline, Timing

TOP_KERNELS = 12

COMMUNICATION = re.compile(r"nccl|Memcpy PtoP|symmetric_memory|symm_mem|nvshmem", re.IGNORECASE)
COMPUTE = re.compile(r"gemm|cutlass|cublas|xmma|nvjet|cudnn|flash_?(fwd|bwd|attn)|fmha", re.IGNORECASE)
COPY = re.compile(r"^(Memcpy|Memset)\b")
TORCH_INTERNAL = re.compile(r"at::native::|at_cuda_detail|at::cuda::|\bc10::|\bcub::|^triton_|elementwise_kernel|reduce_kernel")

# What bounds a call: thresholds on fractions of the call.
HOST_BOUND_IDLE = 0.5       # idle this much of the call: host overhead dominates
NEAR_LIMIT = 0.6            # a resource this busy is the bound
SERIAL_MIN_SHARE = 0.15     # communication and compute each at least this share of busy time ...
SERIAL_MAX_OVERLAP = 0.1    # ... and overlapping less than this fraction of the smaller one
LATENCY_CALL_MS = 0.05      # calls shorter than this, with the roofline under LATENCY_BOUND_SHARE of them,
LATENCY_BOUND_SHARE = 0.25  # are latency-bound (barriers, launches)


@dataclass(frozen=True)
class DeviceActivity:
    """One kernel, memcpy or memset on the device, in microseconds on the profiler's clock."""

    name: str
    start_us: float
    end_us: float


def classify(name: str) -> str:
    """communication, compute, copy, other (torch's own kernels) or custom (the rest)."""
    if COMMUNICATION.search(name):
        return "communication"
    if COPY.search(name):
        return "copy"
    if COMPUTE.search(name):
        return "compute"
    if TORCH_INTERNAL.search(name):
        return "other"
    return "custom"


def busy_us(activities: Iterable[DeviceActivity]) -> float:
    """Length of the union of the activities' intervals."""
    total, end = 0.0, float("-inf")
    for activity in sorted(activities, key=lambda a: a.start_us):
        if activity.end_us <= end:
            continue
        total += activity.end_us - max(activity.start_us, end)
        end = activity.end_us
    return total


def summarize_activities(activities: list[DeviceActivity], iterations: int, wall_us_per_call: float | None = None,
                         rank: int = 0) -> ProfileSummary:
    by_name: dict[str, dict] = {}
    for activity in activities:
        row = by_name.setdefault(activity.name, {"name": activity.name, "calls": 0, "total_us": 0.0, "kind": classify(activity.name)})
        row["calls"] += 1
        row["total_us"] += max(activity.end_us - activity.start_us, 0.0)
    return _summary(list(by_name.values()), iterations, busy_us(activities) if activities else None, wall_us_per_call, rank)


def _summary(rows: list[dict], iterations: int, busy_total_us: float | None, wall_us_per_call: float | None, rank: int) -> ProfileSummary:
    iterations = max(iterations, 1)
    total = sum(r["total_us"] for r in rows) or 1.0
    per_kind = {kind: 0.0 for kind in ("communication", "compute", "custom", "copy", "other")}
    for row in rows:
        per_kind[row["kind"]] += row["total_us"] / iterations
    rows.sort(key=lambda r: r["total_us"], reverse=True)
    return ProfileSummary(
        device_total_us=round(total, 3), iterations=iterations, rank=rank,
        kernels=[{**r, "total_us": round(r["total_us"], 3), "share": round(r["total_us"] / total, 4)} for r in rows[:TOP_KERNELS]],
        wall_us_per_call=None if wall_us_per_call is None else round(wall_us_per_call, 3),
        busy_us_per_call=None if busy_total_us is None else round(busy_total_us / iterations, 3),
        **{f"{kind}_us_per_call": round(value, 3) for kind, value in per_kind.items()},
    )


def analyse(timing: Timing, roofline: Roofline, profile: ProfileSummary | None = None) -> PerformanceAnalysis:
    """The call against the roofline; with a profile, also where the time goes and what bounds it."""
    call_ms = timing.median_ms
    seconds = call_ms * 1e-3 if call_ms > 0 else None
    fields: dict = dict(
        call_ms=call_ms, roofline_ms=roofline.bound_ms, roofline_fraction=round(roofline.bound_ms / call_ms, 4) if call_ms > 0 else 0.0,
        comm_bytes_per_rank=roofline.comm_bytes_per_rank, hbm_bytes_per_rank=roofline.hbm_bytes_per_rank,
        flops_per_rank=roofline.flops_per_rank, link_gbps=roofline.link_gbps, hbm_gbps=roofline.hbm_gbps, tflops=roofline.tflops,
        link_measured=roofline.link_measured, hbm_measured=roofline.hbm_measured,
    )
    fractions: dict[str, float] = {}
    if seconds and roofline.comm_bytes_per_rank:
        fields["achieved_comm_gbps"] = round(roofline.comm_bytes_per_rank / seconds / 1e9, 2)
        fractions["interconnect"] = fields["link_fraction"] = round(fields["achieved_comm_gbps"] / roofline.link_gbps, 4)
    if seconds and roofline.hbm_bytes_per_rank:
        fields["achieved_hbm_gbps"] = round(roofline.hbm_bytes_per_rank / seconds / 1e9, 2)
        fractions["hbm"] = fields["hbm_fraction"] = round(fields["achieved_hbm_gbps"] / roofline.hbm_gbps, 4)
    if seconds and roofline.flops_per_rank:
        fields["achieved_tflops"] = round(roofline.flops_per_rank / seconds / 1e12, 3)
        fractions["compute"] = fields["compute_fraction"] = round(fields["achieved_tflops"] / roofline.tflops, 4)
    if fractions:
        fields["busiest_resource"] = max(fractions, key=fractions.get)
        fields["busiest_fraction"] = fractions[fields["busiest_resource"]]
    if profile is not None:
        fields.update(_breakdown(profile, call_ms))
    fields["bottleneck"] = _bottleneck(fields, fractions)
    return PerformanceAnalysis(**fields)


def _breakdown(profile: ProfileSummary, call_ms: float) -> dict:
    ms = {kind: round(getattr(profile, f"{kind}_us_per_call") / 1e3, 6) for kind in ("communication", "compute", "custom", "copy", "other")}
    out = {f"{kind}_ms": value for kind, value in ms.items()}
    out["profiled_rank"] = profile.rank
    if profile.busy_us_per_call is not None:
        busy = round(profile.busy_us_per_call / 1e3, 6)
        out["busy_ms"] = busy
        out["overlap_ms"] = round(max(sum(ms.values()) - busy, 0.0), 6)
        if call_ms > 0:
            out["idle_ms"] = round(max(call_ms - busy, 0.0), 6)
            out["idle_fraction"] = round(out["idle_ms"] / call_ms, 4)
    return out


def serial_partner_ms(fields: dict) -> float:
    """What runs beside library compute: communication, copies and custom kernels (which in a
    solution usually move data)."""
    return sum(fields.get(k) or 0.0 for k in ("communication_ms", "copy_ms", "custom_ms"))


def _bottleneck(fields: dict, fractions: dict[str, float]) -> str | None:
    idle = fields.get("idle_fraction")
    busiest = fields.get("busiest_resource")
    if idle is not None and idle >= HOST_BOUND_IDLE:
        return "host_overhead"
    if busiest and fractions[busiest] >= NEAR_LIMIT:
        return busiest
    compute, overlap, busy = (fields.get(k) for k in ("compute_ms", "overlap_ms", "busy_ms"))
    if busy and compute is not None and overlap is not None:
        moving = serial_partner_ms(fields)
        if min(moving, compute) >= SERIAL_MIN_SHARE * busy and overlap < SERIAL_MAX_OVERLAP * min(moving, compute):
            return "serialised"
    if fields["call_ms"] < LATENCY_CALL_MS and fields["roofline_ms"] < LATENCY_BOUND_SHARE * fields["call_ms"]:
        return "latency"
    if idle is not None and fields["idle_ms"] > fields["busy_ms"] - fields["roofline_ms"]:
        return "host_overhead"  # the idle time is a bigger loss than the device's distance from the roofline
    return busiest
