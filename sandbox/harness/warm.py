"""Where an evaluation's two rank groups come from.

``FreshGroups`` starts both for one evaluation and ends both after it (``python -m
sandbox.harness``). ``WarmGroups`` serves a long-lived harness (``python -m
sandbox.harness.serve``, for batches and the service): it keeps a candidate group started ahead
(its jail made, torch imported, device and process group ready, calibrated) so an evaluation
begins with its ranks waiting, and it ends that group after its one candidate: a process that
ran candidate code is never reused. The reference's group, trusted code, is kept from one
evaluation of the same problem and shape to the next unless anything went wrong with it.
"""

from __future__ import annotations

import itertools
import shutil
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

from sandbox.harness import messages as m
from sandbox.harness.groups import Answer, RankGroup
from sandbox.harness.launch import candidate_launcher, packages_dir, reference_launcher

log = structlog.get_logger(__name__)

PREFETCH_READY_S = 180.0


@dataclass(frozen=True)
class GroupKey:
    role: str
    world: int
    device: str
    detail: tuple  # reference: (problem ref, dtype, shape); candidate: (allow_nccl,)


def reference_config(problem_ref: str, device: str, dtype: str, shape: dict[str, Any], folder: Path) -> dict[str, Any]:
    return {"mode": device, "dtype": dtype, "shape": shape, "store": str(folder / "store"), "collectives": True,
            "on_cpu": device == "emulate", "problem_ref": problem_ref}


def _fresh(folder: Path) -> Path:
    """``folder``, empty (a group's FileStore must not find an earlier group's file)."""
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    return folder


def start_reference(world: int, device: str, problem_ref: str, dtype: str, shape: dict[str, Any], folder: Path) -> RankGroup:
    (_fresh(folder) / "tmp").mkdir()
    return RankGroup("reference", world, reference_config(problem_ref, device, dtype, shape, folder),
                     reference_launcher(folder, device), None)


def start_candidate(world: int, device: str, allow_nccl: bool, folder: Path, dtype: str, shape: dict[str, Any]) -> RankGroup:
    _fresh(folder)
    (folder / "tmp").mkdir()
    config = {"mode": device, "dtype": dtype, "shape": shape, "store": str(folder / "store"), "collectives": allow_nccl}
    group = RankGroup("candidate", world, config, candidate_launcher(folder, device, "loopback" if allow_nccl else "none"), None)
    group.workdir = folder
    return group


class FreshGroups:
    """Both groups started for this evaluation, in its work dir, and ended after it."""

    def acquire(self, evaluation) -> tuple[RankGroup, RankGroup]:
        config = evaluation.config
        reference = start_reference(config.world, config.device, evaluation.problem.ref, evaluation.dtype, evaluation.shape,
                                    evaluation.workdir / "reference")
        try:
            candidate = start_candidate(config.world, config.device, config.allow_nccl, evaluation.workdir / "candidate",
                                        evaluation.dtype, evaluation.shape)
        except BaseException:
            reference.close()
            raise
        return reference, candidate

    def release(self, evaluation, reference: RankGroup | None, candidate: RankGroup | None) -> None:
        for group in (reference, candidate):
            if group is not None:
                group.close()


class WarmGroups:
    """Groups kept ready between the evaluations of one long-lived harness, under ``root``."""

    def __init__(self, root: Path, depth: int = 2):
        self.root, self.depth = root, depth
        self._ids = itertools.count()
        self._lock = threading.Lock()
        self._references: dict[GroupKey, RankGroup] = {}
        self._candidates: dict[GroupKey, list[tuple[threading.Thread, list]]] = {}  # oldest first

    def _folder(self, role: str) -> Path:
        return self.root / f"{role}-{next(self._ids)}"

    @staticmethod
    def _keys(evaluation) -> tuple[GroupKey, GroupKey]:
        config = evaluation.config
        reference = GroupKey("reference", config.world, config.device,
                             (evaluation.problem.ref, evaluation.dtype, tuple(sorted(evaluation.shape.items()))))
        candidate = GroupKey("candidate", config.world, config.device, (config.allow_nccl, evaluation.dtype))
        return reference, candidate

    def acquire(self, evaluation) -> tuple[RankGroup, RankGroup]:
        ref_key, cand_key = self._keys(evaluation)
        config = evaluation.config
        with self._lock:
            reference = self._references.pop(ref_key, None)
            queue = self._candidates.get(cand_key) or []
            pending = queue.pop(0) if queue else None
        if reference is None:
            reference = start_reference(config.world, config.device, evaluation.problem.ref, evaluation.dtype, evaluation.shape,
                                        self._folder("reference"))
        candidate = None
        if pending is not None:
            thread, holder = pending
            thread.join()
            candidate = holder[0] if holder else None
        if candidate is None:
            candidate = start_candidate(config.world, config.device, config.allow_nccl, self._folder("candidate"),
                                        evaluation.dtype, evaluation.shape)
        return reference, candidate

    def release(self, evaluation, reference: RankGroup | None, candidate: RankGroup | None) -> None:
        ref_key, cand_key = self._keys(evaluation)
        if candidate is not None:
            candidate.close()
            shutil.rmtree(candidate.workdir, ignore_errors=True)
            shutil.rmtree(packages_dir(candidate.workdir), ignore_errors=True)
        if reference is not None:
            if reference.healthy and reference.loaded and not reference.closed:
                with self._lock:
                    old = self._references.pop(ref_key, None)
                    self._references[ref_key] = reference
                if old is not None:
                    old.close()
            else:
                reference.close()
        with self._lock:
            missing = self.depth - len(self._candidates.get(cand_key, []))
        for _ in range(missing):
            self.prefetch(evaluation, cand_key)

    def prefetch(self, evaluation, key: GroupKey) -> None:
        """Start the next candidate group now and let it get ready in the background. Started
        from this (the main) thread: a process started by a thread that then ends would be killed
        with it (the zygote dies with its parent thread)."""
        config = evaluation.config
        holder: list[RankGroup] = []
        try:
            group = start_candidate(config.world, config.device, config.allow_nccl, self._folder("candidate"),
                                    evaluation.dtype, evaluation.shape)
        except Exception as error:  # noqa: BLE001 - the next evaluation starts its own instead
            log.warning("could not start a candidate group ahead", error=f"{type(error).__name__}: {error}")
            return

        def wait_ready() -> None:
            answers = group.collect(m.Ready, PREFETCH_READY_S, "start-up")
            if all(isinstance(a, Answer) for a in answers):
                group.overheads = [a.reply.overhead_ms for a in answers]
                group.device_barrier = all(a.reply.device_barrier for a in answers)
                holder.append(group)
            else:
                group.close()

        thread = threading.Thread(target=wait_ready, daemon=True)
        thread.start()
        with self._lock:
            self._candidates.setdefault(key, []).append((thread, holder))

    def close(self) -> None:
        with self._lock:
            references, candidates = list(self._references.values()), list(self._candidates.values())
            self._references.clear()
            self._candidates.clear()
        for group in references:
            group.close()
        for thread, holder in (entry for queue in candidates for entry in queue):
            thread.join()
            for group in holder:
                group.close()
