"""What the machine did while the benchmarks timed: the CPUs (busy, and stolen by the hypervisor)
from /proc/stat, and the GPU's SM clock, clock-event reasons, utilisation and power through NVML,
sampled in a thread. A benchmark notes each evaluation's window and asks for its summary, so a
reading far from the others can be set beside what else went on then.

    with MachineWatch() as watch:
        began = time.monotonic(); ...; print(watch.window(began, time.monotonic()))
"""

from __future__ import annotations

import ctypes
import threading
import time
from pathlib import Path

# NVML clock-event reasons (nvmlClocksEventReason*), the ones that slow a GPU that has work
REASONS = {0x4: "sw power cap", 0x8: "hw slowdown", 0x20: "sw thermal", 0x40: "hw thermal", 0x80: "power brake"}


class MachineWatch:
    def __init__(self, interval_s: float = 0.02, gpu_index: int = 0):
        self.interval_s = interval_s
        self.samples: list[tuple[float, list[int], tuple[int, int, int, int] | None]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="machine-watch", daemon=True)
        self._nvml, self._handle = _open_nvml(gpu_index)

    def __enter__(self) -> MachineWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(2.0)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.samples.append((time.monotonic(), _cpu_times(), self._gpu()))
            self._stop.wait(self.interval_s)

    def _gpu(self) -> tuple[int, int, int, int] | None:
        if self._nvml is None:
            return None
        mhz, reasons, power, util = ctypes.c_uint(), ctypes.c_ulonglong(), ctypes.c_uint(), (ctypes.c_uint * 2)()
        self._nvml.nvmlDeviceGetClockInfo(self._handle, 1, ctypes.byref(mhz))  # NVML_CLOCK_SM
        self._nvml.nvmlDeviceGetCurrentClocksThrottleReasons(self._handle, ctypes.byref(reasons))
        self._nvml.nvmlDeviceGetPowerUsage(self._handle, ctypes.byref(power))
        self._nvml.nvmlDeviceGetUtilizationRates(self._handle, util)
        return mhz.value, reasons.value, power.value // 1000, util[0]

    def window(self, began: float, ended: float) -> dict:
        """The window's CPU busy and steal shares (of all CPUs, %), the SM clock's least and most
        (MHz), the slowdown reasons seen, the most power (W) and GPU utilisation (%)."""
        inside = [s for s in self.samples if began <= s[0] <= ended]
        before = [s for s in self.samples if s[0] < began]
        points = ([before[-1]] if before else []) + inside
        summary: dict = {"samples": len(inside)}
        if len(points) >= 2:
            first, last = points[0][1], points[-1][1]
            delta = [b - a for a, b in zip(first, last)]
            total = max(sum(delta), 1)
            idle = delta[3] + delta[4]
            steal = delta[7] if len(delta) > 7 else 0
            summary.update(cpu_busy_pct=round(100.0 * (total - idle - steal) / total, 1), steal_pct=round(100.0 * steal / total, 2))
        gpu = [s[2] for s in inside if s[2] is not None]
        if gpu:
            seen = 0
            for _, reasons, _, _ in gpu:
                seen |= reasons
            summary.update(sm_mhz_min=min(g[0] for g in gpu), sm_mhz_max=max(g[0] for g in gpu),
                           slowdowns=[name for bit, name in REASONS.items() if seen & bit],
                           power_w_max=max(g[2] for g in gpu), gpu_util_max=max(g[3] for g in gpu))
        return summary


def line(summary: dict) -> str:
    keys = ("cpu_busy_pct", "steal_pct", "sm_mhz_min", "sm_mhz_max", "slowdowns", "power_w_max", "gpu_util_max")
    return ", ".join(f"{key} {summary[key]}" for key in keys if key in summary)


def _cpu_times() -> list[int]:
    return [int(field) for field in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]


def _open_nvml(index: int):
    try:
        lib = ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return None, None
    handle = ctypes.c_void_p()
    if lib.nvmlInit_v2() != 0 or lib.nvmlDeviceGetHandleByIndex_v2(index, ctypes.byref(handle)) != 0:
        return None, None
    return lib, handle
