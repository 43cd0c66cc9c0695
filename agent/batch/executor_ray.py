"""Episodes as Ray tasks on an existing cluster (``ray.init(address=...)``; a local instance when
no address is given). Each episode gets a placement group of one bundle holding its ``world``
GPUs (``STRICT_PACK``: all on one node) and runs inside it; its result comes back to the driver,
which records it in the same results.jsonl as the local executor. The batch folder must be on a
file system every node sees (the run folders are written by the tasks).

In CI a custom resource stands in for GPUs (``ray.resources_per_rank``), so gang scheduling is
tested on a CPU-only local instance. Ray is an optional extra: ``pip install 'kernel-loop[ray]'``.
"""

from __future__ import annotations

from typing import Any

import structlog

from agent.batch.config import BatchConfig
from agent.batch.episode import EpisodeContext, run_episode
from agent.batch.episodes import EpisodeResult
from agent.errors import UserError
from sandbox.harness.config import gpus_needed

log = structlog.get_logger(__name__)


def ray_episode(ctx: EpisodeContext) -> dict[str, Any]:
    """The task: run the episode on the GPUs Ray gave it."""
    import ray

    ctx.gpus = tuple(str(gpu) for gpu in ray.get_gpu_ids())
    return run_episode(ctx).model_dump(mode="json")


def episode_bundle(config: BatchConfig) -> dict[str, float]:
    """What one episode reserves: a CPU, its GPUs (as ``gpu_resource``), and the per-rank extras."""
    bundle: dict[str, float] = {"CPU": 1}
    needed = gpus_needed(config.device, config.world)
    if needed:
        bundle[config.ray.gpu_resource] = needed
    for name, amount in config.ray.resources_per_rank.items():
        bundle[name] = bundle.get(name, 0) + amount * config.world
    return bundle


class RayExecutor:
    caps_in_flight_per_provider = True  # each episode makes one call at a time: in-flight episodes bound calls

    def __init__(self, config: BatchConfig, workers: int | None = None):
        try:
            import ray
        except ImportError:
            raise UserError("--executor ray needs Ray: pip install 'kernel-loop[ray]'") from None
        self.ray, self.config = ray, config
        if not ray.is_initialized():
            ray.init(address=config.ray.address, ignore_reinit_error=True, log_to_driver=False, configure_logging=False)
        self.capacity = workers or config.workers or config.ray.max_in_flight
        self.bundle = episode_bundle(config)
        self._remote = ray.remote(ray_episode)
        self._tasks: dict[Any, tuple[EpisodeContext, Any]] = {}

    def describe(self) -> str:
        nodes = len([n for n in self.ray.nodes() if n.get("Alive")])
        return f"Ray executor ({nodes} node{'s' if nodes != 1 else ''}), {self.capacity} episodes in flight, each reserving {self.bundle}"

    def submit(self, ctx: EpisodeContext) -> None:
        from ray.util.placement_group import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        group = placement_group([self.bundle], strategy="STRICT_PACK", name=f"kloop-{ctx.episode.id}-try{ctx.attempt}")
        resources = {name: amount for name, amount in self.bundle.items() if name not in ("CPU", "GPU")}
        options: dict[str, Any] = {"num_cpus": 1, "num_gpus": self.bundle.get("GPU", 0), "max_retries": 0,
                                   "scheduling_strategy": PlacementGroupSchedulingStrategy(group, placement_group_bundle_index=0)}
        if resources:
            options["resources"] = resources
        ref = self._remote.options(**options).remote(ctx)
        self._tasks[ref] = (ctx, group)

    def wait(self, timeout_s: float) -> list[tuple[EpisodeContext, EpisodeResult]]:
        if not self._tasks:
            return []
        ready, _ = self.ray.wait(list(self._tasks), num_returns=1, timeout=timeout_s)
        finished = []
        for ref in ready:
            ctx, group = self._tasks.pop(ref)
            try:
                result = EpisodeResult.model_validate(self.ray.get(ref))
            except Exception as error:  # noqa: BLE001 - a lost node or worker: infrastructure
                result = ctx.result(outcome="infra", failure_class="infra:internal", message=f"ray: {type(error).__name__}: {error}"[:500])
            self.ray.util.remove_placement_group(group)
            finished.append((ctx, result))
        return finished

    def close(self, *_: Any) -> None:
        for ref, (_, group) in list(self._tasks.items()):
            self.ray.cancel(ref, force=True)
            self.ray.util.remove_placement_group(group)
        self._tasks.clear()
