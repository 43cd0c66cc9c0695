"""Measures this host's GPUs and prints one JSON line (a :class:`HostMeasurement`).

Run by :func:`sandbox.topology_measure.measure_host` in its own interpreter, so that only this
short-lived process ever holds CUDA contexts:

    python -m sandbox.topology_probe --key KEY --transfer-mib 256 --nvlinks GPU-uuid=18,...

What it measures, each as the median of several timed repetitions (CUDA events):
- HBM: a local copy on each GPU, the faster of a 16-byte-vector copy kernel and torch's own
  device-to-device copy (read + write bytes per second);
- for every ordered GPU pair: a copy-engine copy (``dst.copy_(src)`` across devices), a push
  (a kernel on the source stores into the peer's memory) and a pull (a kernel on the
  destination loads from the peer's memory);
- push 0 -> 1 with few to many blocks (how many SMs it takes to fill the link);
- all GPUs pushing to all their peers at once (the per-GPU rate under collective load).
NVLink multicast is never used.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import socket
import statistics
import sys
import time
from datetime import datetime, timezone

KERNELS = r"""
// Grid-stride copy of n 16-byte vectors, four loads in flight per thread before the stores.
__device__ __forceinline__ void copy_range_v16(const int4* __restrict__ src, int4* __restrict__ dst, unsigned long long n) {
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    for (; i + 3 * stride < n; i += 4 * stride) {
        int4 a = src[i], b = src[i + stride], c = src[i + 2 * stride], d = src[i + 3 * stride];
        dst[i] = a; dst[i + stride] = b; dst[i + 2 * stride] = c; dst[i + 3 * stride] = d;
    }
    for (; i < n; i += stride) dst[i] = src[i];
}

extern "C" __global__ void copy_v16(const int4* __restrict__ src, int4* __restrict__ dst, unsigned long long n) {
    copy_range_v16(src, dst, n);
}

// blockIdx.y picks one destination (a peer's buffer); every destination gets all n vectors.
extern "C" __global__ void scatter_v16(const int4* __restrict__ src, const unsigned long long* __restrict__ dsts, unsigned long long n) {
    copy_range_v16(src, (int4*)dsts[blockIdx.y], n);
}
"""
THREADS = 512
BLOCKS_PER_SM = 4
WARMUP, REPEATS = 2, 10
CLOCK_WARMUP_S = 0.5  # keep each GPU busy this long first: idle clocks are low and ramp up under load
HBM_FACTOR = 4  # HBM copies move this many times the peer transfer size
CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED = 704


class ProbeError(RuntimeError):
    pass


def _gbps(nbytes: float, seconds: float) -> float:
    return round(nbytes / seconds / 1e9, 1)


class Probe:
    def __init__(self, torch, transfer_mib: int):
        from kloop_runtime import driver
        from kloop_runtime.build import build_cubin
        from sandbox.harness.confined_exec import confined_command

        self.torch, self.driver = torch, driver
        self.count = torch.cuda.device_count()
        if self.count == 0:
            raise ProbeError("torch sees no CUDA device (a CPU-only torch build, or no GPU visible)")
        self.nbytes = transfer_mib * 2**20
        self.props = [torch.cuda.get_device_properties(d) for d in range(self.count)]
        cubin = build_cubin(KERNELS, confine=confined_command)
        self.contexts, self.kernels = [], []
        for device in range(self.count):
            self.contexts.append(self._current(device))
            module = driver.CudaModule(cubin)
            self.kernels.append({name: module.kernel(name) for name in ("copy_v16", "scatter_v16")})
        self.src = [torch.empty(self.nbytes, dtype=torch.uint8, device=f"cuda:{d}").random_() for d in range(self.count)]
        self.dst = [torch.empty(self.nbytes, dtype=torch.uint8, device=f"cuda:{d}") for d in range(self.count)]
        for device in range(self.count):
            self._keep_busy(device, CLOCK_WARMUP_S)

    def _keep_busy(self, device: int, seconds: float) -> None:
        self._current(device)
        launch = self.copy_kernel(device, self.src[device], self.dst[device])
        deadline = time.perf_counter() + seconds
        while time.perf_counter() < deadline:
            for _ in range(10):
                launch()
            self.torch.cuda.synchronize(device)

    def _current(self, device: int) -> ctypes.c_void_p:
        """Make ``device``'s primary context current (torch's and ours are the same one)."""
        self.torch.cuda.set_device(device)
        lib = self.driver.libcuda()
        context, handle = ctypes.c_void_p(), ctypes.c_int()
        self.driver.check(lib.cuDeviceGet(ctypes.byref(handle), device), "cuDeviceGet")
        self.driver.check(lib.cuDevicePrimaryCtxRetain(ctypes.byref(context), handle), "cuDevicePrimaryCtxRetain")
        self.driver.check(lib.cuCtxSetCurrent(context), "cuCtxSetCurrent")
        return context

    def enable_peer_access(self, device: int, peer: int) -> bool:
        """Let kernels on ``device`` address ``peer``'s memory; False where P2P is impossible."""
        if not self.torch.cuda.can_device_access_peer(device, peer):
            return False
        self._current(device)
        result = self.driver.libcuda().cuCtxEnablePeerAccess(self.contexts[peer], ctypes.c_uint(0))
        if result not in (0, CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED):
            self.driver.check(result, f"cuCtxEnablePeerAccess({device} -> {peer})")
        return True

    def time_s(self, device: int, launch) -> float:
        """Median seconds of ``launch()`` on ``device``'s current stream."""
        torch = self.torch
        self._current(device)
        for _ in range(WARMUP):
            launch()
        torch.cuda.synchronize(device)
        times = []
        for _ in range(REPEATS):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            launch()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        return statistics.median(times)

    def copy_kernel(self, device: int, src, dst, blocks: int | None = None):
        kernel = self.kernels[device]["copy_v16"]
        grid = blocks or BLOCKS_PER_SM * self.props[device].multi_processor_count
        return lambda: kernel((grid,), (THREADS,), (src, dst, src.numel() // 16))

    def hbm_copy_gbps(self, device: int) -> float:
        """The faster of the copy kernel and torch's own device-to-device copy, read + write bytes."""
        torch = self.torch
        self._current(device)
        src = torch.empty(HBM_FACTOR * self.nbytes, dtype=torch.uint8, device=f"cuda:{device}").random_()
        dst = torch.empty_like(src)
        kernel = self.time_s(device, self.copy_kernel(device, src, dst))
        library = self.time_s(device, lambda: dst.copy_(src))
        del src, dst
        return _gbps(2 * HBM_FACTOR * self.nbytes, min(kernel, library))

    def pair(self, src: int, dst: int) -> dict:
        push_ok = self.enable_peer_access(src, dst)
        pull_ok = self.enable_peer_access(dst, src)
        ce = _gbps(self.nbytes, self.time_s(src, lambda: self.dst[dst].copy_(self.src[src])))
        push = _gbps(self.nbytes, self.time_s(src, self.copy_kernel(src, self.src[src], self.dst[dst]))) if push_ok else None
        pull = _gbps(self.nbytes, self.time_s(dst, self.copy_kernel(dst, self.src[src], self.dst[dst]))) if pull_ok else None
        return {"src": src, "dst": dst, "peer_access": push_ok and pull_ok, "copy_engine_gbps": ce, "sm_write_gbps": push,
                "sm_read_gbps": pull}

    def push_by_blocks(self) -> dict[int, float]:
        sms = self.props[0].multi_processor_count
        counts = sorted({c for c in (1, 2, 4, 8, 16, 32, 64, sms, BLOCKS_PER_SM * sms) if c <= BLOCKS_PER_SM * sms})
        return {blocks: _gbps(self.nbytes, self.time_s(0, self.copy_kernel(0, self.src[0], self.dst[1], blocks))) for blocks in counts}

    def all_peers_write_gbps(self) -> float:
        """Every GPU pushes one chunk into a private slot of every peer's buffer, all at once."""
        torch, count = self.torch, self.count
        chunk = (self.nbytes // (count - 1)) // 16 * 16
        per_device = []
        for device in range(count):
            slots = [self.dst[peer].data_ptr() + (device if device < peer else device - 1) * chunk
                     for peer in range(count) if peer != device]
            per_device.append(torch.tensor(slots, dtype=torch.int64, device=f"cuda:{device}"))
        src = [s[:chunk] for s in self.src]

        def launch(device: int) -> None:
            blocks = max(1, BLOCKS_PER_SM * self.props[device].multi_processor_count // (count - 1))
            self.kernels[device]["scatter_v16"]((blocks, count - 1), (THREADS,), (src[device], per_device[device], chunk // 16))

        rates = []
        for repeat in range(WARMUP + REPEATS):
            events = []
            for device in range(count):
                self._current(device)
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                launch(device)
                end.record()
                events.append((start, end))
            for device, (start, end) in enumerate(events):
                end.synchronize()
                if repeat >= WARMUP:
                    rates.append(_gbps((count - 1) * chunk, start.elapsed_time(end) / 1e3))
        return round(statistics.median(rates), 1)


def measure(key: str, transfer_mib: int, nvlinks: dict[str, int]) -> dict:
    started = time.monotonic()
    import torch

    probe = Probe(torch, transfer_mib)
    notes = []
    gpus = []
    for device, props in enumerate(probe.props):
        uuid = str(getattr(props, "uuid", ""))
        uuid = uuid if uuid.startswith("GPU-") else f"GPU-{uuid}"
        gpus.append({"ordinal": device, "name": props.name, "uuid": uuid, "memory_mib": props.total_memory // 2**20,
                     "sm_count": props.multi_processor_count, "nvlinks_active": nvlinks.get(uuid, 0),
                     "hbm_copy_gbps": probe.hbm_copy_gbps(device)})
    pairs = [probe.pair(a, b) for a in range(probe.count) for b in range(probe.count) if a != b]
    if probe.count == 1:
        notes.append("one GPU visible: no peer pairs to measure, HBM only")
    for pair in pairs:
        if not pair["peer_access"]:
            notes.append(f"GPU {pair['src']} and GPU {pair['dst']} cannot address each other's memory (no P2P): "
                         "kernels cannot reach the peer, copies go through host memory")
    by_blocks = probe.push_by_blocks() if probe.count > 1 and pairs[0]["peer_access"] else {}
    all_peers = probe.all_peers_write_gbps() if probe.count > 1 and all(p["peer_access"] for p in pairs) else None
    link = "NVLink" if any(g["nvlinks_active"] for g in gpus) else ("PCIe" if probe.count > 1 else "none")
    return {"host": socket.gethostname(), "key": key, "driver": _driver_version(probe), "torch": torch.__version__,
            "cuda": torch.version.cuda, "gpus": gpus, "link": link, "pairs": pairs, "sm_write_gbps_by_blocks": by_blocks,
            "all_peers_write_gbps": all_peers, "transfer_mib": transfer_mib,
            "measured_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "wall_s": round(time.monotonic() - started, 2), "notes": notes}


def _driver_version(probe: Probe) -> str:
    version = ctypes.c_int()
    probe.driver.libcuda().cuDriverGetVersion(ctypes.byref(version))
    return f"CUDA driver API {version.value // 1000}.{version.value % 1000 // 10}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sandbox.topology_probe")
    parser.add_argument("--key", required=True)
    parser.add_argument("--transfer-mib", type=int, default=256)
    parser.add_argument("--nvlinks", default="", help="uuid=active_links,... as NVML reports them")
    parser.add_argument("--driver", default="")
    args = parser.parse_args(argv)
    nvlinks = {k: int(v) for k, _, v in (item.partition("=") for item in args.nvlinks.split(",") if item)}
    try:
        result = measure(args.key, args.transfer_mib, nvlinks)
        if args.driver:
            result["driver"] = args.driver
    except Exception as error:  # noqa: BLE001 - the parent turns this into one clear line
        result = {"error": f"the topology probe failed: {type(error).__name__}: {error}"}
    sys.stdout.write(json.dumps(result) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
