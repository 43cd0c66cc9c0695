"""The server's evaluation capacity: CPU slots, the GPU pool, warm harnesses.

Every evaluation of every job (an eval job's one, each step of a run, each episode of a batch)
goes through :meth:`Evaluations.evaluate`: it waits for a CPU slot or for its GPUs (the same
``GpuPool`` batches use; a world-4 cuda evaluation holds 4 GPUs, an emulated one 1), so GPU work
is capped and the service degrades by queueing. With the local sandbox it runs in a warm harness
(``sandbox.evaluate.WarmEvaluator``, one per GPU set, kept between evaluations); with Docker in a
fresh container on exactly the leased GPUs. A cancel ends the harness (or container) at once.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import structlog

from agent.run_config import SandboxSettings
from sandbox.backends import LocalSandbox
from sandbox.evaluate import WarmEvaluator
from sandbox.gpu_pool import GpuPool, GpuPoolError
from sandbox.harness.config import HarnessConfig, gpus_needed
from sandbox.report import EvalReport
from service.control import JobControl, JobFailed

log = structlog.get_logger(__name__)

WAIT_STEP_S = 0.5


def visible_gpus() -> tuple[str, ...]:
    """Indices of this host's GPUs (NVML, no CUDA context), () when there are none."""
    from sandbox.nvml import NvmlUnavailable, inventory

    try:
        return tuple(str(i) for i in range(len(inventory().gpus)))
    except NvmlUnavailable:
        return ()


class Evaluations:
    def __init__(self, gpus: tuple[str, ...] = (), cpu_slots: int = 2, backend: str = "local", image: str | None = None,
                 workdir: str | None = None, env: dict[str, str] | None = None):
        if backend not in ("local", "docker"):
            raise ValueError(f"unknown sandbox backend {backend!r}")
        self.gpus = tuple(gpus)
        self.pool = GpuPool(self.gpus) if self.gpus else None
        self.cpu_slots = cpu_slots
        self._cpu = threading.BoundedSemaphore(cpu_slots)
        self.backend, self.image, self.workdir, self.env = backend, image, workdir, dict(env or {})
        self._idle: dict[tuple[str, ...], list[tuple[LocalSandbox, WarmEvaluator]]] = {}
        self._lock = threading.Lock()
        self._closed = False

    def check(self, config: HarnessConfig) -> None:
        """Raise JobFailed when this server can never run ``config`` (more GPUs than it has)."""
        needed = gpus_needed(config.device, config.world)
        if needed > len(self.gpus):
            have = f"{len(self.gpus)} GPU(s)" if self.gpus else "no GPUs"
            raise JobFailed(f"--device {config.device} at world {config.world} needs {needed} GPU(s); this server has {have}")

    def evaluate(self, source: str, config: HarnessConfig, control: JobControl) -> EvalReport:
        """Judge ``source`` once capacity is free; JobCancelled if the job is cancelled meanwhile."""
        self.check(config)
        with self._capacity(gpus_needed(config.device, config.world), control) as gpu_ids:
            control.check()
            if self.backend == "docker":
                report = self._in_container(source, config, gpu_ids, control)
            else:
                report = self._warm(source, config, gpu_ids, control)
        control.check()
        return report

    @contextmanager
    def _capacity(self, needed: int, control: JobControl) -> Iterator[tuple[str, ...]]:
        if needed == 0:
            while not self._cpu.acquire(timeout=WAIT_STEP_S):
                control.check()
            try:
                yield ()
            finally:
                self._cpu.release()
            return
        assert self.pool is not None
        while True:
            control.check()
            try:
                lease = self.pool.lease(needed, timeout_s=WAIT_STEP_S)
                break
            except GpuPoolError:
                continue
        with lease:
            yield lease.device_ids

    def _warm(self, source: str, config: HarnessConfig, gpu_ids: tuple[str, ...], control: JobControl) -> EvalReport:
        box, evaluator = self._take(gpu_ids)
        try:
            with control.stoppable(box.terminate):  # the warm harness and its ranks; it reports a crash, then is closed
                report = evaluator.evaluate(source, config)
        except BaseException:
            self._discard(box, evaluator)
            raise
        if control.cancelled.is_set():
            self._discard(box, evaluator)
        else:
            self._give(gpu_ids, box, evaluator)
        return report

    def _take(self, gpu_ids: tuple[str, ...]) -> tuple[LocalSandbox, WarmEvaluator]:
        with self._lock:
            idle = self._idle.get(gpu_ids)
            if idle:
                return idle.pop()
        env = dict(self.env)
        env["CUDA_VISIBLE_DEVICES"] = ",".join(gpu_ids)  # "" on CPU: the harness sees no GPU it was not given
        box = LocalSandbox(base_dir=self.workdir, env=env)
        box.start()
        return box, WarmEvaluator(box)

    def _give(self, gpu_ids: tuple[str, ...], box: LocalSandbox, evaluator: WarmEvaluator) -> None:
        with self._lock:
            if not self._closed:
                self._idle.setdefault(gpu_ids, []).append((box, evaluator))
                return
        self._discard(box, evaluator)

    @staticmethod
    def _discard(box: LocalSandbox, evaluator: WarmEvaluator) -> None:
        evaluator.close()
        box.close()

    def _in_container(self, source: str, config: HarnessConfig, gpu_ids: tuple[str, ...], control: JobControl) -> EvalReport:
        from sandbox.backends import open_sandbox
        from sandbox.evaluate import evaluate_in

        settings = SandboxSettings(backend="docker", gpus=",".join(gpu_ids) or None, image=self.image)
        box = open_sandbox("docker", **settings.backend_options(config))
        with control.stoppable(box.terminate):
            box.start()
            try:
                return evaluate_in(box, source, config)
            finally:
                box.close()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle = [entry for entries in self._idle.values() for entry in entries]
            self._idle.clear()
        for box, evaluator in idle:
            self._discard(box, evaluator)


def default_cpu_slots() -> int:
    return max(1, (os.cpu_count() or 2) // 2)
