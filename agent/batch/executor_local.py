"""Episodes on this machine: a pool of worker threads (episodes spend their time in model calls
and sandbox subprocesses), GPUs leased from one shared ``sandbox.gpu_pool.GpuPool`` (a world-4
episode holds 4 GPUs for its whole run), model calls gated per provider."""

from __future__ import annotations

from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Any

from agent.batch.config import BatchConfig
from agent.batch.episode import EpisodeContext, ProviderGates, run_episode
from agent.batch.episodes import EpisodeResult
from agent.errors import UserError
from sandbox.gpu_pool import GpuPool, GpuPoolError, parse_gpu_ids
from sandbox.harness.config import gpus_needed


def batch_gpus(config: BatchConfig) -> tuple[str, ...]:
    """The GPUs a batch may use: the config's ``gpus``, else every visible one (none on cpu)."""
    if not gpus_needed(config.device, config.world):
        return ()
    try:
        ids = parse_gpu_ids(config.gpus)
    except GpuPoolError as error:
        raise UserError(f"gpus: {error}") from None
    if not ids:
        from sandbox.nvml import NvmlUnavailable, inventory

        try:
            ids = tuple(gpu.uuid for gpu in inventory().gpus)  # UUIDs: NVML indices need not be CUDA ordinals
        except NvmlUnavailable as error:
            raise UserError(f"device {config.device} needs GPUs and none could be listed ({error}); set `gpus:` or use device cpu") from None
    needed = gpus_needed(config.device, config.world)
    if len(ids) < needed:
        raise UserError(f"an episode at device {config.device}, world {config.world} needs {needed} GPUs; the batch has {len(ids)}")
    return ids


def default_workers(config: BatchConfig, gpus: tuple[str, ...]) -> int:
    needed = gpus_needed(config.device, config.world)
    return max(1, len(gpus) // needed) if needed else 2


class LocalExecutor:
    """``submit(ctx)`` starts an episode; ``wait(timeout_s)`` returns the ones that finished."""

    caps_in_flight_per_provider = False  # calls are gated one by one here

    def __init__(self, config: BatchConfig, workers: int | None = None, gpus: tuple[str, ...] | None = None):
        """``gpus``: the GPUs episodes lease (default: the config's, else every visible one); () where
        something else leases them per evaluation (the service)."""
        self.config = config
        self.gpus = batch_gpus(config) if gpus is None else gpus
        self.capacity = workers or config.workers or default_workers(config, self.gpus)
        self.gpu_pool = GpuPool(self.gpus) if self.gpus else None
        self.gates = ProviderGates(config)
        self._threads = ThreadPoolExecutor(self.capacity, thread_name_prefix="episode")
        self._futures: dict[Future, EpisodeContext] = {}

    def describe(self) -> str:
        gpus = f", GPUs {','.join(self.gpus)}" if self.gpus else ""
        return f"local executor, {self.capacity} workers{gpus}"

    def submit(self, ctx: EpisodeContext) -> None:
        self.prepare(ctx)
        self._futures[self._threads.submit(self._run, ctx)] = ctx

    def prepare(self, ctx: EpisodeContext) -> None:
        """What an episode is given before it starts: the gate its model calls pass."""
        ctx.gate = self.gates.gate(ctx.entry.provider)

    def _run(self, ctx: EpisodeContext) -> EpisodeResult:
        needed = gpus_needed(self.config.device, self.config.world)
        if not needed or self.gpu_pool is None:
            return run_episode(ctx)
        with self.gpu_pool.lease(needed) as lease:
            ctx.gpus = lease.device_ids
            return run_episode(ctx)

    def wait(self, timeout_s: float) -> list[tuple[EpisodeContext, EpisodeResult]]:
        if not self._futures:
            return []
        done, _ = wait(list(self._futures), timeout=timeout_s, return_when=FIRST_COMPLETED)
        finished = []
        for future in done:
            ctx = self._futures.pop(future)
            error = future.exception()
            result = future.result() if error is None else ctx.result(outcome="infra", failure_class="infra:internal",
                                                                      message=f"{type(error).__name__}: {error}"[:500])
            finished.append((ctx, result))
        return finished

    def close(self, *_: Any) -> None:
        self._threads.shutdown(wait=False, cancel_futures=True)  # all done, or interrupted: never wait on an episode
