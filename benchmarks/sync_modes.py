"""A rank's timed interval in fresh processes, by how the CUDA context waits for the GPU.

A timed call on a GPU is a device-wide sync, a start event, the call, a device-wide sync and an
end event (``RankDevice.timed``): the interval holds two host-GPU round trips. Fresh processes
took 0.016 to 0.050 ms for an empty one (``benchmarks/reference_call_noise.py``, H200,
2026-12-03), which is as much as a small call. Is that spread how the host waits for the GPU
(the primary context's scheduling flag: auto, spin, yield or blocking sync)?

    python benchmarks/sync_modes.py [--processes 6] [--calls 200] [--modes auto spin yield blocking]

Each process sets its flag through the driver before torch makes the context, then times, as a
rank does (L2 flush, barrier-free world 1): an empty interval, a 12,288-element bf16 clone + an
NCCL all_reduce (all_reduce's small reference), and a 64 MiB clone; and, for comparison, the
empty interval with no middle sync (events alone) and a bare device sync on the host clock.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from paths import ROOT  # noqa: F401 - puts the repository on sys.path
from table import SPREAD_HEADER, print_table, spread

FLAGS = {"auto": 0, "spin": 1, "yield": 2, "blocking": 4}  # CU_CTX_SCHED_*


def _set_schedule(mode: str) -> int:
    """The primary context's scheduling flag, set through the driver before torch makes the
    context; returns the device's ordinal (``_actual_schedule`` reads the flag back)."""
    driver = ctypes.CDLL("libcuda.so.1")
    assert driver.cuInit(0) == 0
    device = ctypes.c_int()
    assert driver.cuDeviceGet(ctypes.byref(device), 0) == 0
    assert driver.cuDevicePrimaryCtxSetFlags(device, FLAGS[mode]) == 0, "the primary context is already active"
    return device.value


def _actual_schedule(ordinal: int) -> int:
    driver = ctypes.CDLL("libcuda.so.1")
    flags, active = ctypes.c_uint(), ctypes.c_int()
    driver.cuDevicePrimaryCtxGetState(ordinal, ctypes.byref(flags), ctypes.byref(active))
    return flags.value & 7


def measure(mode: str, calls: int, folder: str) -> dict:
    ordinal = _set_schedule(mode)
    import torch

    from sandbox.rank.device import RankDevice

    device = RankDevice(0, 1, "cuda", str(Path(folder) / "store"), collectives=True)
    dist = device.dist
    small = torch.randn(12_288, device="cuda").to(torch.bfloat16)
    large = torch.randn(32 * 2**20, device="cuda").to(torch.bfloat16)

    def reference_small():
        out = small.clone()
        dist.all_reduce(out)
        return out

    def events_alone():
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        end.record()
        end.synchronize()
        return None, start.elapsed_time(end)

    def host_sync():
        torch.cuda.synchronize()
        began = time.perf_counter()
        torch.cuda.synchronize()
        return None, (time.perf_counter() - began) * 1000.0

    bodies = {"empty interval": lambda: device.timed(lambda: None),
              "all_reduce small (ref)": lambda: device.timed(reference_small),
              "64 MiB clone": lambda: device.timed(large.clone),
              "events alone": events_alone,
              "host sync (host clock)": host_sync}
    times: dict[str, list[float]] = {name: [] for name in bodies}
    for index in range(calls + 10):  # the first ten of each: warm-up
        for name, body in bodies.items():
            device.flush_l2(device.flushes)
            _, ms = body()
            if index >= 10:
                times[name].append(ms)
    dist.destroy_process_group()
    cpu = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[36])
    return {"times": times, "flag": _actual_schedule(ordinal), "cpu": cpu}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--processes", type=int, default=6, help="fresh processes per mode, the modes interleaved")
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--modes", nargs="+", default=list(FLAGS), choices=list(FLAGS))
    parser.add_argument("--json", type=Path, help="also write every process's medians here")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child is not None:
        with tempfile.TemporaryDirectory() as folder:
            print(json.dumps(measure(args.child, args.calls, folder)))
        return 0
    rows, medians = [], []
    for process in range(1, args.processes + 1):
        for mode in args.modes:
            done = subprocess.run([sys.executable, __file__, "--child", mode, "--calls", str(args.calls)],
                                  capture_output=True, text=True)
            if done.returncode != 0:
                print(f"process {process} ({mode}) failed: {done.stderr.strip()[-400:]}", flush=True)
                continue
            result = json.loads(done.stdout.strip().splitlines()[-1])
            summary = {"process": process, "mode": mode, "flag": result["flag"], "cpu": result["cpu"]}
            for name, values in result["times"].items():
                rows.append([process, mode, result["flag"], name, *spread(values)])
                summary[name] = sorted(values)[len(values) // 2]
            medians.append(summary)
            print(" ".join(f"{k}={v:.4f}" if isinstance(v, float) else f"{k}={v}" for k, v in summary.items()), flush=True)
    print_table(f"a rank's timed interval (ms) by the context's scheduling flag, {args.calls} calls, fresh processes",
                ["process", "mode", "flag", "body", *SPREAD_HEADER], rows)
    by_mode = []
    for mode in args.modes:
        for name in ("empty interval", "all_reduce small (ref)", "64 MiB clone"):
            values = [entry[name] for entry in medians if entry["mode"] == mode]
            if values:
                by_mode.append([mode, name, len(values), round(min(values), 4), round(max(values), 4),
                                round(max(values) / max(min(values), 1e-6), 3)])
    print_table("medians over processes, by mode", ["mode", "body", "processes", "min", "max", "max/min"], by_mode)
    if args.json:
        args.json.write_text(json.dumps(medians, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
