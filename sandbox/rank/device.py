"""A rank's device, process group and the harness's own timing primitives.

Set up before any candidate code exists in the process: the process group (collectives that
work only when the run allows them), the calibration of an empty timed interval (sent to the
parent at once, so nothing the candidate does later can change it), the buffer that flushes the
L2 cache before a timed call, and the device barrier that aligns ranks before one.
"""

from __future__ import annotations

import math
import os
import time
from datetime import timedelta
from typing import Any

L2_FLUSH_BYTES = 256 * 2**20  # > 2x the L2 of any current NVIDIA GPU (H200: 60 MB, B200: 126 MB)
# before a timed call the L2 flush is repeated for about this long (flush_l2; HarnessConfig.warm_up_ms). On an H100 host on
# 2026-12-06, interleaved in one run (benchmarks/device.sh warm_up_ab), 0.5 ms against 2 ms: a warm world-1 evaluation's
# median 0.92 against 1.21 s and 1.09 against 1.60 s (8 and 4 of each, in two device calls); the speedup's max/min over
# five jobs 1.09 and 2.53 against 1.51 and 1.69 (1 ms: 1.89): no steadier for the longer warm-up
WARM_UP_MS = 0.5
MAX_FLUSHES = 64
CALIBRATION_SAMPLES = 31
NO_COLLECTIVES_BACKEND = "kloop_no_collectives"


def _register_no_collectives_backend() -> str:
    """A backend whose every collective raises: the default group of a run that does not allow
    NCCL. Ranks still get ranks, a world size, a group name and the group's store (what symmetric
    memory needs); they get no communication from it."""
    import torch.distributed as dist
    from torch._C._distributed_c10d import FakeProcessGroup

    def create(common, _options):
        options = FakeProcessGroup.Options()
        if hasattr(options, "error_on_collective"):
            options.error_on_collective = True
        return FakeProcessGroup._create_internal(common.group_rank, common.group_size, options)

    if NO_COLLECTIVES_BACKEND.upper() not in dist.Backend._plugins:
        dist.Backend.register_backend(NO_COLLECTIVES_BACKEND, create, extended_api=True, devices=["cpu", "cuda"])
    return NO_COLLECTIVES_BACKEND


def flushes_for(busy_ms: float, flush_ms: float) -> int:
    """How many L2 flushes of ``flush_ms`` each keep the GPU busy for ``busy_ms`` (at least one
    where there is a flush and a warm-up at all; none where ``flush_ms`` is 0: no GPU flush)."""
    if flush_ms <= 0 or busy_ms <= 0:
        return 0
    return max(1, min(MAX_FLUSHES, math.ceil(busy_ms / flush_ms)))


class RankDevice:
    """``mode``: cpu (gloo), cuda (one GPU per rank) or emulate (every rank on GPU 0). ``on_cpu``
    puts this rank's work on the CPU whatever the mode (the reference in emulation)."""

    def __init__(self, rank: int, world: int, mode: str, store_path: str, collectives: bool, on_cpu: bool = False):
        import torch
        import torch.distributed as dist

        self.torch, self.dist = torch, dist
        self.rank, self.world, self.mode = rank, world, mode
        if mode == "cpu" or on_cpu:
            self.device = torch.device("cpu")
            # ranks share the host's cores: more intra-op threads than cores makes OpenMP spin-waits
            # take turns, and a small einsum 10x slower
            torch.set_num_threads(max(1, (os.cpu_count() or 1) // world))
        else:
            self.device = torch.device("cuda", rank if mode == "cuda" else 0)
            torch.cuda.set_device(self.device)
        if collectives:
            backend = "nccl" if self.device.type == "cuda" and mode == "cuda" else "gloo"
        else:
            backend = _register_no_collectives_backend()
        store = dist.FileStore(store_path, world)
        kwargs: dict[str, Any] = {}
        if backend == "nccl":
            kwargs["device_id"] = self.device
        dist.init_process_group(backend, store=store, rank=rank, world_size=world, timeout=timedelta(seconds=600), **kwargs)
        self.backend = backend
        self.cuda = self.device.type == "cuda"
        self._perf_counter = time.perf_counter
        if self.cuda:
            self._event = torch.cuda.Event
            self._sync = torch.cuda.synchronize
            self._flush = torch.empty(L2_FLUSH_BYTES, dtype=torch.uint8, device=self.device) if mode == "cuda" else None
        # one flush's device time in this process (0: no flush); the parent sends one count of them to both groups
        self.flush_ms = self._flush_ms() if self.cuda and self._flush is not None else 0.0
        self.flushes = flushes_for(WARM_UP_MS, self.flush_ms)
        self.barrier = self._device_barrier() if self.cuda and mode == "cuda" and world > 1 else None
        self._store, self._barriers = store, 0
        if not collectives:
            self._serve_barriers()
        self.overhead_ms = self._calibrate()

    # ---------------------------------------------------------------- timing primitives
    def synchronize(self) -> None:
        if self.cuda:
            self._sync(self.device)

    def flush_l2(self, count: int) -> None:
        """The L2 flushed before a timed call, the flush repeated for about WARM_UP_MS so that the
        GPU is busy, not idle, when the call starts: on the H200 after 20 ms idle (the harness's own
        work between calls) a flushed 64 MiB copy took 0.096 ms after one flush and 0.080-0.088 ms
        after 4 to 32 (benchmarks/timing_noise.py); with the commitment hashed on the device too,
        five jobs' speedups of one solution spread 1.58x instead of 2.87x, side by side in one
        device call (benchmarks/timing_stability.py); 0.5 ms of flushes were no less steady than 2 ms
        (WARM_UP_MS). ``count`` flushes: the parent's warm-up
        before a call (a ``prime`` message, outside its clock) sends the reference's measure
        (``flushes``) to both groups, so that the harness's work is the same in both; the call
        itself flushes once more, after unmasking its inputs (sandbox/rank/input_mask.py)."""
        if self.cuda and self._flush is not None:
            for _ in range(max(0, min(count, MAX_FLUSHES))):
                self._flush.zero_()

    def _flush_ms(self) -> float:
        """One flush's device time, timed once the GPU is warm: the least of three timings (a group
        started ahead is stopped while another evaluation times, and a timing it spans would read
        the flush as slower than it is)."""
        for _ in range(8):
            self._flush.zero_()
        per_flush_ms = []
        for _ in range(3):
            start, end = self._event(enable_timing=True), self._event(enable_timing=True)
            start.record()
            for _ in range(8):
                self._flush.zero_()
            end.record()
            end.synchronize()
            per_flush_ms.append(start.elapsed_time(end) / 8)
        return max(min(per_flush_ms), 1e-3)

    def timed(self, call) -> tuple[Any, float]:
        """``call()``'s result and its time in ms: device-wide sync before and after (work on side
        streams counts), CUDA events on the GPU, the host clock on the CPU."""
        if not self.cuda:
            start = self._perf_counter()
            result = call()
            return result, (self._perf_counter() - start) * 1000.0
        self._sync(self.device)
        if self.barrier is not None:
            self.barrier()
        start, end = self._event(enable_timing=True), self._event(enable_timing=True)
        start.record()
        result = call()
        self._sync(self.device)
        end.record()
        end.synchronize()
        return result, start.elapsed_time(end)

    def timed_ahead(self, call, flushes: int) -> tuple[Any, float]:
        """``call()``'s result and its device time in ms, its launch hidden: ``flushes`` L2
        flushes queued and not waited for, then the events around the call on the current stream,
        so the call's work is queued while the GPU still flushes and the interval holds none of the
        host's launch or sync. Sound for trusted code only (the reference): work a solution put on
        a stream of its own could run beside the flushes, before the interval starts, or after it
        ends. On the CPU, ``timed``'s host clock."""
        if not self.cuda or self._flush is None:
            return self.timed(call)
        self.flush_l2(max(1, flushes))
        start, end = self._event(enable_timing=True), self._event(enable_timing=True)
        start.record()
        result = call()
        end.record()
        end.synchronize()
        return result, start.elapsed_time(end)

    def _calibrate(self) -> float:
        samples = sorted(self.timed(lambda: None)[1] for _ in range(CALIBRATION_SAMPLES))
        return samples[len(samples) // 2]

    def _serve_barriers(self) -> None:
        """``dist.barrier()`` and ``dist.monitored_barrier()`` keep working in a run without
        collectives (solutions use them to order setup across ranks): the device barrier where
        there is one (stream-ordered, as NCCL's is), else the device drained and the ranks met
        through the group's store."""

        def barrier(group=None, async_op=False, device_ids=None, timeout=None, wait_all_ranks=False):
            if self.barrier is not None:
                self.barrier()
            else:
                self.synchronize()
                self._host_barrier()
            return None

        self.dist.barrier = barrier
        self.dist.monitored_barrier = barrier

    def _host_barrier(self) -> None:
        if self.world == 1:
            return
        self._barriers += 1
        key = f"kloop/barrier/{self._barriers}"
        if self._store.add(key, 1) == self.world:
            self._store.set(f"{key}/open", b"1")
        self._store.wait([f"{key}/open"])

    def _device_barrier(self):
        """A barrier kernel among the ranks on the current stream (torch symmetric memory's own),
        so every rank's timed interval starts together; None where symmetric memory is missing."""
        try:
            import torch.distributed._symmetric_memory as symm_mem

            group = self.dist.group.WORLD
            if hasattr(symm_mem, "enable_symm_mem_for_group"):
                import warnings

                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    symm_mem.enable_symm_mem_for_group(group.group_name)
            buffer = symm_mem.empty(16, dtype=self.torch.uint32, device=self.device)
            handle = symm_mem.rendezvous(buffer, group)
            channel = 31  # the last channel: candidates' SymmetricBuffer barriers use the low ones of their own buffers
            return lambda: handle.barrier(channel=channel)
        except Exception:  # noqa: BLE001 - alignment by the parent's go message alone
            return None
