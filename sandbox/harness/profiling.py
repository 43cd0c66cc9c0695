"""Profile a few calls with the torch profiler and keep the top kernels by device time."""

from __future__ import annotations

from typing import Any, Callable

TOP_KERNELS = 12


def profile_calls(torch, call: Callable[[], Any], synchronize: Callable[[], None], iterations: int) -> dict[str, Any]:
    from torch.profiler import ProfilerActivity, profile

    call()  # warm
    synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(iterations):
            call()
        synchronize()
    rows = []
    for event in prof.key_averages():
        device_us = getattr(event, "self_device_time_total", None)
        if device_us is None:
            device_us = getattr(event, "self_cuda_time_total", 0.0)
        if device_us and device_us > 0:
            rows.append({"name": event.key, "calls": int(event.count), "total_us": float(device_us)})
    total = sum(r["total_us"] for r in rows) or 1.0
    rows.sort(key=lambda r: r["total_us"], reverse=True)
    kernels = [{**r, "share": r["total_us"] / total} for r in rows[:TOP_KERNELS]]
    return {"device_total_us": total, "iterations": iterations, "kernels": kernels}
