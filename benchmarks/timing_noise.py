"""Where a timed call's noise on a GPU could come from, one table per suspect, in one process.

On the H200 (2026-12-02) the reference as its own candidate read 0.06x to 2.7x across jobs at
world 1 (all_reduce, 64 MB): the same clone-and-all-reduce claimed 0.035 ms in one process and
0.3-0.45 ms in others, and the harness's own cost of a call (about 20 ms: the commitment copies
and hashes the outputs and inputs) differed between two groups of processes by up to 2 ms. The
suspects, measured here side by side:

  idle gap     the GPU idles while the host commits the last call: does a call after an idle gap
               of 0 / 5 / 20 ms take longer (clocks that fall when idle)?
  retained     the harness keeps a round's outputs until it has revealed some: does a call whose
               output needs a fresh allocation (outputs kept) take longer than one served from the
               allocator's cache (outputs freed)?
  warm-up      the harness's remedy for the idle gap: the L2 flush repeated before the call (a
               timed 64 MiB clone and a timed bf16 matmul after 20 ms idle, by the flushes before it)
  placement    the host side of a call (a pinned copy to the host, SHA-256 in threads) on the CPUs
               local to the GPU against all CPUs (NUMA: /sys/bus/pci/devices/*/local_cpulist)

    python benchmarks/timing_noise.py [--mib 64] [--calls 40]     # --device cpu: the host side only
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from paths import ROOT  # noqa: F401 - puts the repository on sys.path
from table import SPREAD_HEADER, print_table, spread


def _row(name: str, values: list[float]) -> list:
    return [name, *spread(values)]


HEADER = ["case", *SPREAD_HEADER]


def _timed_clone(torch, source, keep: list | None, before=None, matmul: bool = False) -> float:
    if before is not None:
        before()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    out = source @ source if matmul else source.clone()
    end.record()
    torch.cuda.synchronize()
    if keep is not None:
        keep.append(out)
    return start.elapsed_time(end)


def idle_gaps(torch, source, calls: int) -> list[list]:
    rows = []
    for gap_ms in (0.0, 5.0, 20.0):
        times = []
        for _ in range(calls):
            time.sleep(gap_ms / 1000.0)
            times.append(_timed_clone(torch, source, None))
        rows.append(_row(f"after {gap_ms:g} ms idle", times))
    return rows


def warm_ups(torch, source, matrix, calls: int) -> list[list]:
    """After 20 ms idle, the 256 MiB L2 flush repeated k times, then the timed call (as the rank
    does: flushes, a device sync, then the timed interval)."""
    from sandbox.rank.device import L2_FLUSH_BYTES

    flush = torch.empty(L2_FLUSH_BYTES, dtype=torch.uint8, device="cuda")
    for _ in range(20):
        flush.zero_()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(20):
        flush.zero_()
    end.record()
    end.synchronize()
    per_flush = start.elapsed_time(end) / 20
    rows = []
    for what, operand, matmul in (("64 MiB clone", source, False), ("bf16 matmul 4096^2", matrix, True)):
        for flushes in (1, 4, 8, 16, 32):
            def before(count=flushes):
                time.sleep(0.02)
                for _ in range(count):
                    flush.zero_()

            times = [_timed_clone(torch, operand, None, before, matmul) for _ in range(calls)]
            rows.append(_row(f"{what}, {flushes} flushes (~{flushes * per_flush:.2f} ms)", times))
    return rows


def retained_outputs(torch, source, calls: int, per_round: int = 4) -> list[list]:
    rows = []
    for label, keep_outputs in (("outputs freed", False), ("outputs kept for a round", True)):
        times = []
        for _ in range(calls // per_round):
            kept: list = []
            for _ in range(per_round):
                times.append(_timed_clone(torch, source, kept if keep_outputs else None))
            del kept
        rows.append(_row(label, times))
    return rows


def _gpu_local_cpus(torch) -> set[int] | None:
    props = torch.cuda.get_device_properties(0)
    ids = [getattr(props, name, None) for name in ("pci_domain_id", "pci_bus_id", "pci_device_id")]
    if None in ids:
        return None
    path = Path("/sys/bus/pci/devices") / f"{ids[0]:04x}:{ids[1]:02x}:{ids[2]:02x}.0" / "local_cpulist"
    if not path.exists():
        return None
    cpus: set[int] = set()
    for part in path.read_text().strip().split(","):
        low, _, high = part.partition("-")
        cpus.update(range(int(low), int(high or low) + 1))
    return cpus


def host_side(torch, mib: int, calls: int, device: str) -> list[list]:
    """What the commitment does on the host, per call: a copy to the host (pinned, from the GPU)
    and SHA-256 over 8 MiB chunks in threads, on each CPU placement."""
    nbytes = mib * 2**20
    source = torch.randint(0, 255, (nbytes,), dtype=torch.uint8, device=device)
    placements = {"all CPUs": os.sched_getaffinity(0)}
    local = _gpu_local_cpus(torch) if device == "cuda" else None
    if local and local & placements["all CPUs"] and local != placements["all CPUs"]:
        placements["CPUs local to the GPU"] = local & placements["all CPUs"]
        remote = placements["all CPUs"] - local
        if remote:
            placements["CPUs remote from the GPU"] = remote
    rows = []
    original = os.sched_getaffinity(0)
    try:
        for name, cpus in placements.items():
            os.sched_setaffinity(0, cpus)
            host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=device == "cuda")  # first touched on these CPUs
            host.zero_()
            pool = ThreadPoolExecutor(max_workers=max(1, min(8, len(cpus))))
            copies, hashes = [], []
            for _ in range(calls):
                started = time.perf_counter()
                host.copy_(source)
                copied = time.perf_counter()
                view = memoryview(host.numpy()).cast("B")
                chunks = [view[i:i + 8 * 2**20] for i in range(0, nbytes, 8 * 2**20)]
                list(pool.map(lambda chunk: hashlib.sha256(chunk).digest(), chunks))
                copies.append((copied - started) * 1000.0)
                hashes.append((time.perf_counter() - copied) * 1000.0)
            pool.shutdown()
            rows.append(_row(f"copy to host, {name} ({len(cpus)})", copies))
            rows.append(_row(f"sha-256 in threads, {name} ({len(cpus)})", hashes))
    finally:
        os.sched_setaffinity(0, original)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mib", type=int, default=64, help="one call's output, MiB (all_reduce's default: 64)")
    parser.add_argument("--calls", type=int, default=40)
    parser.add_argument("--device", default=None, help="cuda when a GPU is there, else cpu (the host side only)")
    args = parser.parse_args(argv)
    if args.calls < 4 or args.mib < 1:
        parser.error("--calls must be at least 4 and --mib at least 1")
    import torch

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: no GPU here")
    nodes = sorted(p.name for p in Path("/sys/devices/system/node").glob("node[0-9]*"))
    print(f"device {device}; NUMA nodes {len(nodes) or 'unknown'}; CPUs {len(os.sched_getaffinity(0))}", flush=True)
    if device == "cuda":
        source = torch.randn(args.mib * 2**18, device="cuda")  # fp32: mib MiB
        for _ in range(5):
            _timed_clone(torch, source, None)
        print_table(f"a {args.mib} MiB clone timed with CUDA events, by the idle gap before it ({args.calls} calls each)",
                    HEADER, idle_gaps(torch, source, args.calls))
        matrix = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
        print_table(f"after 20 ms idle, the L2 flush repeated before the timed call ({args.calls} calls each)",
                    HEADER, warm_ups(torch, source, matrix, args.calls))
        print_table(f"the same clone, its outputs freed or kept for a round of 4 ({args.calls} calls each)",
                    HEADER, retained_outputs(torch, source, args.calls))
    print_table(f"the host side of a commitment to {args.mib} MiB, by CPU placement ({args.calls} calls each)",
                HEADER, host_side(torch, args.mib, args.calls, device))
    return 0


if __name__ == "__main__":
    sys.exit(main())
