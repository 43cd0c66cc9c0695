"""Profile a few calls with the torch profiler: every kernel, memcpy and memset on the device,
classified and summed per call (:mod:`sandbox.performance`).

Calls are made as the timing stage makes them (ranks aligned, device synchronised after each
call), so the profile's busy time can be set against the timed call.
"""

from __future__ import annotations

import statistics
import time
from typing import Any, Callable

from sandbox.performance import DeviceActivity, summarize_activities, summarize_totals

_perf_counter = time.perf_counter


def profile_calls(torch, call: Callable[[], Any], synchronize: Callable[[], None], iterations: int,
                  align: Callable[[], None] = lambda: None, rank: int = 0) -> dict[str, Any]:
    from torch.profiler import ProfilerActivity, profile

    call()  # warm
    synchronize()
    walls = []
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(iterations):
            align()
            started = _perf_counter()
            call()
            synchronize()
            walls.append((_perf_counter() - started) * 1e6)
    wall = statistics.median(walls)
    activities = device_activities(torch, prof)
    if activities:
        return summarize_activities(activities, iterations, wall, rank).model_dump()
    return summarize_totals(_totals(prof), iterations, wall, rank).model_dump()


def device_activities(torch, prof) -> list[DeviceActivity]:
    """Device-side events (kernels, memcpy, memset) with their start and end."""
    cuda = getattr(torch.autograd, "DeviceType", None)
    cuda = getattr(cuda, "CUDA", None)
    found = []
    try:
        events = prof.events()
    except Exception:  # noqa: BLE001 - a profiler without raw events: fall back to totals
        return []
    for event in events or ():
        if cuda is None or getattr(event, "device_type", None) != cuda:
            continue
        span = getattr(event, "time_range", None)
        if span is None or span.end <= span.start:
            continue
        found.append(DeviceActivity(name=event.name, start_us=float(span.start), end_us=float(span.end)))
    return found


def _totals(prof) -> list[dict[str, Any]]:
    rows = []
    for event in prof.key_averages():
        device_us = getattr(event, "self_device_time_total", None)
        if device_us is None:
            device_us = getattr(event, "self_cuda_time_total", 0.0)
        if device_us and device_us > 0:
            rows.append({"name": event.key, "calls": int(event.count), "total_us": float(device_us)})
    return rows
