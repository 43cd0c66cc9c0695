"""Where an evaluation's two rank groups come from.

``FreshGroups`` starts both for one evaluation and ends both after it (``python -m
sandbox.harness``). ``WarmGroups`` serves a long-lived harness (``python -m
sandbox.harness.serve``, for batches and the service): it keeps candidate groups started ahead
(their jails made, torch imported, device and process group ready) so an evaluation begins with
its ranks waiting, and it ends each group after its one candidate: a process that ran candidate
code is never reused. The reference's group, trusted code, is kept from one
evaluation of the same problem and shape to the next unless anything went wrong with it, and with
it, on a GPU, the reference's time alone (``KeptAlone``).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import queue
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

from kloop_runtime.tree_removal import remove_tree
from sandbox.harness import messages as m
from sandbox.harness.groups import Answer, RankGroup
from sandbox.harness.launch import candidate_launcher, packages_dir, reference_launcher

log = structlog.get_logger(__name__)

PREFETCH_READY_S = 180.0
# candidate groups started ahead per kind, by device: a group started as an evaluation ends is taken when the depth-th
# after it begins. A start-up (jail, torch, device context, process group) goes on only between timings (``quiet``); on an
# H100 host it took about as long as four or five small evaluations: 24 world-1 evaluations of all_reduce ran 39.2 and 39.8
# a minute at depth 8 against 29.0 and 33.7 at depth 4, interleaved in one device call on 2026-12-05, every fourth one
# waiting 1.8-2.7 s at depth 4 (`bash benchmarks/device.sh throughput_depth`). On the host CPU the start-ups take the
# very cores the evaluations need; emulation (every rank a context on one GPU) was not measured.
POOL_DEPTH = {"cuda": 8}
DEFAULT_POOL_DEPTH = 4


def env_count(name: str) -> int | None:
    """A positive count from the environment variable ``name``; None where it is unset, or is
    not one (said in the log: the harness goes on with its own default)."""
    text = os.environ.get(name, "").strip()
    if not text:
        return None
    if text.isdigit() and int(text) > 0:
        return int(text)
    log.warning("ignored: not a positive whole number", variable=name, value=text[:40])
    return None


DEPTH_OVERRIDE = env_count("KLOOP_WARM_DEPTH")  # one depth for every device: for A/B runs of the pool


def pool_depth(device: str) -> int:
    return int(DEPTH_OVERRIDE) if DEPTH_OVERRIDE else POOL_DEPTH.get(device, DEFAULT_POOL_DEPTH)


MAX_POOLED_RANKS = 16  # ranks started ahead in all, over every kind (each holds memory, on a GPU a device context)
# ranks of reference groups kept loaded between evaluations, the most recently used first: each holds a device context,
# torch and up to 512 MiB of expected outputs a rank, and a batch over many problems would keep one group for each
MAX_KEPT_REFERENCE_RANKS = 8
MIN_AVAILABLE_BYTES_PER_RANK = 2**30  # host memory that must be available for each rank of a group started ahead
# evaluations in all that one measure of the reference's time alone serves in a kept reference group, by device (else
# 1: measured in every evaluation), for at most KEEP_ALONE_S. It is the yardstick against which an evaluation tells whether
# its candidate slowed the reference down (sandbox/harness/pipeline.py _slowed), taken before any candidate code ran: in
# an earlier evaluation of the same group that still holds, for the processes and the device are the same and every
# candidate group handed back has ended before the next evaluation begins. It is a warm-up round and 64 calls, each after
# its warm-up flush: on an H100 host on 2026-12-05 the build stage (this and the calibration) took 0.5-0.6 s of a warm
# evaluation's 1.65-2.3 s (benchmarks/throughput.py, world 1, all_reduce). An evaluation that finds the reference
# slowed beside its candidate drops it (``drop_alone``), so a change of the machine's pace is measured again at once.
# On the host CPU, where the load comes and goes, it is measured every time.
KEEP_ALONE = {"cuda": 8}
KEEP_ALONE_S = 300.0
KEEP_ALONE_OVERRIDE = env_count("KLOOP_KEEP_ALONE")  # one count for every device: for A/B runs and tests


@dataclass
class KeptAlone:
    """The reference's timed rounds alone (raw claims: each evaluation subtracts its own empty
    interval), when they were measured (``time.monotonic``), its device time a call, how many
    evaluations they served."""

    rounds: list
    measured_at: float
    device_ms: float | None = None  # its device time a call, the launch hidden (pipeline._reference_device_ms)
    uses: int = 1


def kept_alone(group: RankGroup, plan: tuple, device: str) -> KeptAlone | None:
    """``group``'s time alone for this timing ``plan``, counted as used once more, if it may still
    serve; else None (measure it, then ``keep_alone``)."""
    kept = group.kept_alone.get(plan)
    most = int(KEEP_ALONE_OVERRIDE) if KEEP_ALONE_OVERRIDE else KEEP_ALONE.get(device, 1)
    if kept is None or kept.uses >= most or time.monotonic() - kept.measured_at > KEEP_ALONE_S:
        group.kept_alone.pop(plan, None)
        return None
    kept.uses += 1
    return kept


def keep_alone(group: RankGroup, plan: tuple, rounds: list, device_ms: float | None = None) -> None:
    group.kept_alone[plan] = KeptAlone(rounds, time.monotonic(), device_ms)


def drop_alone(group: RankGroup) -> None:
    group.kept_alone.clear()


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
    remove_tree(folder)
    folder.mkdir(parents=True)
    return folder


def start_reference(world: int, device: str, problem_ref: str, dtype: str, shape: dict[str, Any], folder: Path) -> RankGroup:
    (_fresh(folder) / "tmp").mkdir()
    return RankGroup("reference", world, reference_config(problem_ref, device, dtype, shape, folder),
                     reference_launcher(folder, device), None)


def start_candidate(world: int, device: str, allow_nccl: bool, folder: Path, dtype: str, shape: dict[str, Any],
                    import_shape_checks: bool) -> RankGroup:
    """``import_shape_checks``: its ranks import what torch's shape checks import on first use
    (sandbox.rank.zygote.SHAPE_CHECKS, which symmetric memory's first buffer needs) before they are
    ready: a group started ahead hides that, and a fresh one pays it beside the reference group's
    start-up rather than in its candidate's first call."""
    _fresh(folder)
    (folder / "tmp").mkdir()
    config = {"mode": device, "dtype": dtype, "shape": shape, "store": str(folder / "store"), "collectives": allow_nccl,
              "import_shape_checks": import_shape_checks}
    group = RankGroup("candidate", world, config, candidate_launcher(folder, device, "loopback" if allow_nccl else "none"), None)
    group.workdir = folder
    return group


def uses_symmetric_memory(evaluation) -> bool:
    """Whether the candidate's source names symmetric memory: a hint for its group's start-up, never a
    rule."""
    try:
        source = (evaluation.workdir / evaluation.config.solution).read_text(errors="replace")
    except OSError:
        return False
    return any(word in source for word in ("SymmetricBuffer", "symmetric_memory", "symm_mem"))


class FreshGroups:
    """Both groups started for this evaluation, in its work dir, and ended after it."""

    def acquire(self, evaluation) -> tuple[RankGroup, RankGroup]:
        config = evaluation.config
        reference = start_reference(config.world, config.device, evaluation.problem.ref, evaluation.dtype, evaluation.shape,
                                    evaluation.workdir / "reference")
        try:
            candidate = start_candidate(config.world, config.device, config.allow_nccl, evaluation.workdir / "candidate",
                                        evaluation.dtype, evaluation.shape, uses_symmetric_memory(evaluation))
        except BaseException:
            reference.close()
            raise
        return reference, candidate

    def release(self, evaluation, reference: RankGroup | None, candidate: RankGroup | None) -> None:
        for group in (reference, candidate):
            if group is not None:
                group.close()

    @contextlib.contextmanager
    def quiet(self):
        """Nothing of this source's starts in the background: a timing needs no guard."""
        yield


class _Pending:
    """A candidate group started ahead: ``group`` once started, ``ready`` once its ranks said so;
    ``done`` is set when it is known whether they will."""

    def __init__(self) -> None:
        self.done = threading.Event()
        self.group: RankGroup | None = None
        self.ready = False


class WarmGroups:
    """Groups kept ready between the evaluations of one long-lived harness, under ``root``.

    Candidate groups come from a pool per kind, ``depth`` deep (by default ``pool_depth`` of its
    device; fewer for many ranks: at most ``max_ranks`` ranks started ahead in all, and only while
    the host has the memory): each one
    taken is replaced as its evaluation ends, so the next is usually ready when its evaluation begins. One
    thread that lives as long as this object starts them (a zygote dies with the thread that
    started it). A correct evaluation's report does not wait for its group's end; ``acquire``
    waits until every group handed back is gone (its memory and its share of the machine free
    again: a timing must not share it with a dying group) before it hands out the next. No group
    is ever handed out twice. No group starts while an evaluation times (``quiet``), and the
    start-ups under way are stopped meanwhile: a start-up imports torch in every rank and opens
    a device context, the very work a timing must not share the machine with (on a two-core
    host it left an honest candidate's calls 0.6-0.8 ms a call more unaccounted than the
    reference's, in both of a run's timings)."""

    def __init__(self, root: Path, depth: int | None = None, max_ranks: int = MAX_POOLED_RANKS,
                 max_reference_ranks: int = MAX_KEPT_REFERENCE_RANKS):
        self.root, self.depth, self.max_ranks, self.max_reference_ranks = root, depth, max_ranks, max_reference_ranks
        self._ids = itertools.count()
        self._lock = threading.Lock()
        self._references: dict[GroupKey, RankGroup] = {}  # least recently used first
        self._candidates: dict[GroupKey, list[_Pending]] = {}  # oldest first
        self._used: dict[GroupKey, float] = {}  # key -> when a group of it was last taken
        self._jobs: queue.Queue = queue.Queue()  # for the starting thread
        self._ending = 0  # groups handed back and not yet ended
        self._in_flight: set[_Pending] = set()  # groups started ahead and not yet ready (or failed)
        self._timing = 0  # evaluations in a timed phase
        self._changed = threading.Condition(self._lock)
        self._closed = False
        self._worker = threading.Thread(target=self._work, name="warm-groups", daemon=True)
        self._worker.start()

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
            pool = self._candidates.setdefault(cand_key, [])
            pending = pool.pop(0) if pool else None
            self._used[cand_key] = time.monotonic()
        if reference is None:
            reference = start_reference(config.world, config.device, evaluation.problem.ref, evaluation.dtype, evaluation.shape,
                                        self._folder("reference"))
        reference.spent_s = {}  # this evaluation's own (a kept group counted the earlier ones)
        candidate = None
        waited = time.perf_counter()
        if pending is not None:
            pending.done.wait()
            candidate = pending.group if pending.ready else None
            if candidate is not None and (candidate.process.poll() is not None or not all(candidate.alive)):
                self._end(candidate)  # died while it waited (killed for memory, say): never handed out
                candidate = None
        ending = time.perf_counter()
        self.wait_ended()  # the memory and the time the groups handed back held are free before this evaluation counts on them
        spent = evaluation.parent_spent_s  # in the report's harness breakdown
        spent["waiting for a group started ahead"] = ending - waited
        spent["waiting for used groups to end"] = time.perf_counter() - ending
        if candidate is None:
            candidate = start_candidate(config.world, config.device, config.allow_nccl, self._folder("candidate"),
                                        evaluation.dtype, evaluation.shape, uses_symmetric_memory(evaluation))
        return reference, candidate

    def release(self, evaluation, reference: RankGroup | None, candidate: RankGroup | None) -> None:
        """The candidate group ends (it ran candidate code): in the background after a correct
        verdict, here otherwise (its ranks' last words then complete in the report's logs)."""
        ref_key, cand_key = self._keys(evaluation)
        if candidate is not None:
            if evaluation.report.status == "correct":
                self._end(candidate)
            else:
                _end_candidate(candidate)
        if reference is not None:
            if reference.healthy and reference.loaded and not reference.closed:
                with self._lock:
                    old = self._references.pop(ref_key, None)
                    self._references[ref_key] = reference
                    ended = [old, *self._excess_references_locked()]
                for group in ended:
                    if group is not None:
                        self._end(group)
            else:
                reference.close()
        # the replacement starts once this evaluation's timings are over: a start-up (torch imported by every rank)
        # beside the reference timed alone would make that time too slow, and hide a candidate that slows the
        # reference down (tests/fixtures/hostile/spin_while_reference_runs.py); the thread that starts it lets
        # the report go at once
        self._refill(evaluation, cand_key)

    def wait_ended(self, timeout_s: float | None = None) -> bool:
        """Wait until every group handed back has ended; False if ``timeout_s`` passed first."""
        with self._changed:
            return self._changed.wait_for(lambda: self._ending == 0, timeout_s)

    @contextlib.contextmanager
    def quiet(self):
        """A timed phase, with no start-up running: none begins until it ends, and those under way
        are stopped for it (SIGSTOP to their trees, in which no candidate code has run yet) and go
        on after. Waiting for them to finish instead cost every evaluation of a batch on the H200
        about 2 s (benchmarks/throughput.py: the build stage, which times the reference alone, took
        2.8-3.8 s). One that cannot be stopped is waited for (up to PREFETCH_READY_S)."""
        with self._changed:
            self._timing += 1
            # launching a group's processes takes a moment; then there is a tree to stop
            self._changed.wait_for(lambda: all(entry.group is not None for entry in self._in_flight), PREFETCH_READY_S)
            starting = [entry for entry in self._in_flight if entry.group is not None]
        try:
            with contextlib.ExitStack() as stopped:
                for entry in starting:
                    if not entry.group.pausable or stopped.enter_context(entry.group.paused()) is not None:
                        entry.done.wait(PREFETCH_READY_S)
                yield
        finally:
            with self._changed:
                self._timing -= 1
                self._changed.notify_all()

    def ready_count(self, evaluation, timeout_s: float = 0.0) -> int:
        """How many candidate groups for ``evaluation``'s kind are started ahead and ready, once
        each has become ready or failed (waiting up to ``timeout_s`` in all)."""
        _, key = self._keys(evaluation)
        with self._lock:
            entries = list(self._candidates.get(key, []))
        deadline = time.monotonic() + timeout_s
        for entry in entries:
            entry.done.wait(max(deadline - time.monotonic(), 0.0))
        return sum(entry.ready for entry in entries)

    # ---------------------------------------------------------------- the worker's jobs
    def _refill(self, evaluation, key: GroupKey) -> None:
        config = evaluation.config
        spec = (config.world, config.device, config.allow_nccl, evaluation.dtype, dict(evaluation.shape))
        with self._lock:
            if self._closed:
                return
            depth = min(pool_depth(key.device) if self.depth is None else self.depth, max(1, self.max_ranks // key.world))
            missing = min(depth - len(self._candidates.setdefault(key, [])), _affordable(key.world))
            entries = [_Pending() for _ in range(max(missing, 0))]
            self._candidates[key].extend(entries)
            evicted = self._evict_locked()
        for entry in entries:
            self._jobs.put(("start", entry, spec))
        for entry in evicted:
            self._jobs.put(("drop", entry, None))

    def _excess_references_locked(self) -> list[RankGroup]:
        """The least recently used reference groups beyond ``max_reference_ranks`` ranks kept in
        all, taken out (the one kept last always stays)."""
        excess = []
        while len(self._references) > 1 and sum(key.world for key in self._references) > self.max_reference_ranks:
            excess.append(self._references.pop(next(iter(self._references))))
        return excess

    def _evict_locked(self) -> list[_Pending]:
        """Groups of the least recently used kinds, beyond ``max_ranks`` ranks started ahead in all."""
        evicted = []
        for key in sorted(self._candidates, key=lambda k: self._used.get(k, 0.0)):
            while sum(k.world * len(pool) for k, pool in self._candidates.items()) > self.max_ranks and self._candidates[key]:
                evicted.append(self._candidates[key].pop())
        return evicted

    def _end(self, group: RankGroup) -> None:
        """End ``group`` in the background (killing needs no particular thread)."""
        with self._lock:
            self._ending += 1

        def end() -> None:
            try:
                _end_candidate(group) if group.role == "candidate" else group.close()
            except Exception as error:  # noqa: BLE001 - counted as ended: close() kills what is left
                log.warning("could not end a rank group", error=f"{type(error).__name__}: {error}")
            finally:
                with self._changed:
                    self._ending -= 1
                    self._changed.notify_all()

        threading.Thread(target=end, name="warm-group-end", daemon=True).start()

    def _work(self) -> None:
        while True:
            job, subject, spec = self._jobs.get()
            if job == "stop":
                return
            try:
                if job == "start":
                    self._start(subject, spec)
                elif job == "drop":
                    if subject.group is not None:
                        _end_candidate(subject.group)
            except Exception as error:  # noqa: BLE001 - the worker must outlive any one job
                log.warning("a warm group job failed", job=job, error=f"{type(error).__name__}: {error}")

    def _start(self, entry: _Pending, spec: tuple) -> None:
        world, device, allow_nccl, dtype, shape = spec
        with self._changed:
            self._changed.wait_for(lambda: self._timing == 0 or self._closed)
            if self._closed:
                entry.done.set()
                return
            self._in_flight.add(entry)
        try:
            # whatever its candidate will be, on a GPU device (on the host CPU there is no symmetric memory, and the
            # import, about 1 s there, would only keep the pool from being ready)
            group = start_candidate(world, device, allow_nccl, self._folder("candidate"), dtype, shape,
                                    import_shape_checks=device != "cpu")
        except Exception as error:  # noqa: BLE001 - the evaluation that takes it starts its own instead
            log.warning("could not start a candidate group ahead", error=f"{type(error).__name__}: {error}")
            self._started(entry)
            return
        with self._changed:
            entry.group = group
            self._changed.notify_all()  # a timed phase waits for a tree it can stop

        def wait_ready() -> None:  # only reads: the group's processes belong to the worker thread
            try:
                answers = group.collect(m.Ready, PREFETCH_READY_S, "start-up")
            except Exception:  # noqa: BLE001 - a timeout: not ready
                answers = []
            if answers and all(isinstance(a, Answer) for a in answers) and not group.closed:
                group.took_ready(answers)
                entry.ready = True
            else:
                _end_candidate(group)
            self._started(entry)

        threading.Thread(target=wait_ready, name="warm-group-ready", daemon=True).start()

    def _started(self, entry: _Pending) -> None:
        """``entry``'s start-up is over, ready or not."""
        entry.done.set()
        with self._changed:
            self._in_flight.discard(entry)
            self._changed.notify_all()

    def close(self) -> None:
        """End every group: kept, started ahead, or still ending; returns when all are gone."""
        with self._changed:
            self._closed = True  # from now on nothing is started
            self._changed.notify_all()  # a start-up waiting for a timing to end gives up
            references = list(self._references.values())
            entries = [entry for pool in self._candidates.values() for entry in pool]
            self._references.clear()
            self._candidates.clear()
        self._jobs.put(("stop", None, None))
        self._worker.join()  # every job before the stop is done
        for group in references:
            group.close()
        for entry in entries:
            if entry.group is not None:
                _end_candidate(entry.group)  # a group still starting too: its ready-waiter then sees it closed
            entry.done.wait(PREFETCH_READY_S)
        self.wait_ended()


def _affordable(world: int) -> int:
    """How many more groups of ``world`` ranks the host's available memory allows to start ahead."""
    import psutil

    return int(psutil.virtual_memory().available // (world * MIN_AVAILABLE_BYTES_PER_RANK))


def _end_candidate(group: RankGroup) -> None:
    """Kill a candidate group's whole tree (waits until it is gone) and remove its folders."""
    group.close()
    if group.workdir is not None:
        remove_tree(group.workdir)
        remove_tree(packages_dir(group.workdir))
