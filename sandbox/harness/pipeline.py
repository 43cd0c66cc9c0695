"""The harness pipeline: static checks -> start-up -> build -> correctness (-> stress) ->
performance -> recheck -> profile. Runs in the trusted parent; stops at the first failure and
says precisely why.

Two groups of rank processes serve it: the reference's (trusted: the input maker and the judge's
expectations) and the candidate's (hostile, in its jail). Every call a candidate rank makes has
inputs the reference drew under a secret key and handed over as sealed plain data; correctness
trials, back-to-back calls, timed calls and the re-check are all the same kind of call, and the
candidate commits to each call's outputs when the call ends, before knowing whether it will be
asked to show them. Timed calls are interleaved with the reference's, round by round, on the
same inputs, and the claimed times are checked against the parent's own clock
(sandbox/harness/timing.py). Expected outputs never exist in a process the candidate controls.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import math
import shutil
import statistics
import threading
import time
from pathlib import Path
from typing import Any

import structlog

from kloop_runtime import settings
from problems import get_problem, load_ref
from problems.contract import Problem
from sandbox import performance, topology
from sandbox.harness import messages as m
from sandbox.harness import staged_inputs, timing
from sandbox.harness.calls import Call, CallPlan, Commitment, Expected, Inputs, Revealed, close_commitments
from sandbox.harness.compile_server import CompileServer
from sandbox.harness.config import HarnessConfig
from sandbox.harness.groups import Answer, RankFailure, RankGroup, StageTimeout, close_answers
from sandbox.harness.judge import judge
from sandbox.harness.launch import packages_dir
from sandbox.harness.reference_rank import MAX_CALLS_PER_MAKE
from sandbox.harness.sealed_cache import SealedCache, cache_key
from sandbox.harness.seeds import host_secret
from sandbox.harness.static_checks import check_source
from sandbox.harness.trees import NEARLY_CONSTANT_DISTINCT
from sandbox.harness.verdict import Verdict
from sandbox.harness.warm import FreshGroups, drop_alone, keep_alone, kept_alone
from sandbox.jail import shared_shm
from sandbox.nvml import gpu_model_name
from sandbox.rank import commitment, device_kernels, wire
from sandbox.rank.wire import close_received
from sandbox.rank.device import flushes_for
from sandbox.rank.zygote import walls_ranks_off
from sandbox.report import CompileStats, EvalReport, LogExcerpt, ProfileSummary, RankVerdict, Timing

log = structlog.get_logger(__name__)

ROUND_BYTES = 2 * 2**30  # a round's inputs, per rank, at most (each call has its own)
# all timed calls' inputs, per rank and group: large calls are timed fewer times (MIN_ROUNDS at least). On a GPU, at 1 GiB a
# call of 64 MiB (all_reduce's default size) was timed 16 times, not the config's 50 iterations, and a job's median moved with
# those few calls' noise (benchmarks/timing_stability.py). On a CPU each call's inputs are made and staged by the host's own
# cores, so 4 GiB took a job 2.3 times as long (421 s against 182 s for tests/benchmarks/test_pkb_benchmarks.py's
# evaluations on 2 cores) for a speedup no CPU run asks to be precise (no timing precision there)
TIMED_BYTES = {"cuda": 4 * 2**30, "cpu": 2**30}
MAX_ROUND_CALLS = 16
MIN_ROUNDS = 4  # timed rounds per group at the least (the speedup's interval resamples them)
CLOCK_ATTEMPTS = 2  # timings that must each fail the clock check before a candidate is rejected
# the reference may run this much slower beside the candidate than alone before the speedup is taken against its time
# alone: on a GPU, the job's own, an honest reference keeps its speed; on the host CPU a busy machine moves it more
SLOWED_REFERENCE = {"cuda": 1.25, "cpu": 2.0}
CALIBRATION_CALLS = 12  # harness-only calls timed in each group before candidate code runs (on a GPU)
MAX_TIMED_FACTOR = 4  # timing goes on past the planned calls, while the speedup is less precise than asked, to this many times them
PAUSE_FAILED = "the candidate's processes could not be stopped"
MEMFD_INPUTS_NOTE = ("inputs reached the ranks through memory files, masked until each call (the reference could not share "
                     "device memory here, or KLOOP_INPUT_BLOBS=memfd): staging them took longer than from device memory")
CHECKED_SHARE = 0.2  # of each timed round's calls, this share (at least one) is checked
WALL_MISSING_NOTE = ("the candidate's ranks could not be walled off from each other (a Landlock domain each needs Linux 6.12 or "
                     "later): a rank could have shown the judge a copy of a call's bytes that another rank made for it")
PROFILED_CALLS = 5
DEVICE_TIME_CALLS = 8  # the reference's calls timed with the launch hidden (_reference_device_ms)
MAX_REVEAL_BYTES = 64 * 2**30
STAGES = ("static", "build", "correctness", "stress", "performance", "recheck", "profile")


class Evaluation:
    def __init__(self, config: HarnessConfig, workdir: Path, problem: Problem | None = None, groups=None):
        self.config = config
        self.group_source = groups or FreshGroups()
        self.workdir = workdir.resolve()
        self.problem = problem or (load_ref(config.problem_ref) if config.problem_ref else get_problem(config.problem))
        self.dtype = config.dtype or self.problem.spec.dtype
        self.size = config.resolved_size()
        self.shape = self.problem.shape(self.size)
        self.cache_root = (config.cache_dir or settings.cache_root()).resolve()
        self.secret = host_secret(self.cache_root)
        self.plan = CallPlan(self.secret, config.seed, config.trials)
        self.groups: list[RankGroup] = []
        self.compile_server: CompileServer | None = None
        self.rounds = 0
        self.device_name = "cpu"
        self.parent_spent_s: dict[str, float] = {}  # the parent's own work: reading blobs, judging
        self.reference_calibration = timing.Series([])  # the harness's own per-call cost in each group (see _calibrate)
        self.candidate_calibration = timing.Series([])
        self.reference_alone: timing.Series | None = None  # the reference timed before candidate code existed
        self.timing_stop: str | None = None  # why the last timing stopped (set by _timed_series)
        self.staged: dict[int, staged_inputs.StagedRound] = {}  # round -> inputs shared with the ranks (cpu)
        self.report = EvalReport(
            status="crashed", message="", problem=self.problem.name, world=config.world, device=config.device,
            dtype=self.dtype, size=self.size, trials=config.trials, public_seeds=[config.seed + t for t in range(config.trials)],
        )

    # ------------------------------------------------------------------ driver
    def run(self) -> EvalReport:
        started = time.monotonic()
        try:
            self._timed_stage("static", self._static_checks)
            self._timed_stage("startup", self._start)
            self._timed_stage("build", self._build)
            self._timed_stage("correctness", self._correctness)
            if self.config.stress_calls:
                self._timed_stage("stress", self._stress)
            if self.config.is_timed():
                with self.group_source.quiet():
                    self._timed_stage("performance", self._performance)
            self._timed_stage("recheck", self._recheck)
            if self.config.is_profiled():
                self._timed_stage("profile", self._profile)
            self._check_work_folder()
            self.report.stage = "done"
            self.report.status = "correct"
            self.report.message = self._success_message()
        except Verdict as verdict:
            self._apply(verdict)
        except m.ProtocolViolation as violation:
            self._apply(Verdict("rejected", f"the candidate broke the harness protocol: {violation}"))
        except StageTimeout as timeout:
            self.report.status = "timeout"
            self.report.message = f"{timeout}: a spin-wait that never got its signal, a deadlock between ranks, or just too slow"
        finally:
            teardown = time.monotonic()
            self.group_source.release(self, *(self.groups or [None, None]))
            for staged in self.staged.values():
                staged.close()
            self.staged.clear()
            self._attach_logs()
            if self.compile_server is not None:
                self.report.compiles = CompileStats(requests=self.compile_server.requests, distinct=self.compile_server.distinct,
                                                    failed=self.compile_server.failed)
            if self.report.status != "correct":
                self.report.speedup = None
                self.report.speedup_ci = None
            self.report.stage_wall_s["teardown"] = round(time.monotonic() - teardown, 3)
            self.report.harness_breakdown_s = self._breakdown()
            self.report.wall_s = round(time.monotonic() - started, 3)
        return self.report

    def _check_work_folder(self) -> None:
        """The candidate's work folder against its limit once more before a verdict: the watch
        reads it once a second (sandbox/harness/memory_watch.py), and a short evaluation can end
        between two reads with the folder over it (tests/fixtures/hostile/fill_the_work_folder.py)."""
        watch = self.candidate.memory_watch
        if watch is not None and watch.check_workdir():
            raise Verdict("crashed", self.candidate.stopped_for or "the candidate's work folder is over its limit")

    def _breakdown(self) -> dict[str, float]:
        spent = {f"parent {kind}": s for kind, s in self.parent_spent_s.items()}
        for group in self.groups:
            if group is not None:
                spent.update({f"{group.role} {kind}": s for kind, s in group.spent_s.items()})
        return {kind: round(s, 3) for kind, s in sorted(spent.items(), key=lambda item: -item[1])}

    @contextlib.contextmanager
    def _parent_work(self, kind: str):
        started = time.perf_counter()
        try:
            yield
        finally:
            self.parent_spent_s[kind] = self.parent_spent_s.get(kind, 0.0) + time.perf_counter() - started

    def _apply(self, verdict: Verdict) -> None:
        self.report.status = verdict.status
        self.report.message = verdict.message
        for name, value in verdict.fields.items():
            if name == "notes":
                self.report.notes.extend(value)
            else:
                setattr(self.report, name, value)

    def _timed_stage(self, name: str, stage) -> None:
        if name in STAGES:
            self.report.stage = name
        started = time.monotonic()
        try:
            stage()
        finally:
            self.report.stage_wall_s[name] = round(time.monotonic() - started, 3)

    # ------------------------------------------------------------------ static checks and start-up
    def _static_checks(self) -> None:
        path = self.workdir / self.config.solution
        try:
            self.source = path.read_text()
        except (OSError, UnicodeDecodeError) as error:
            raise Verdict("build_failed", f"cannot read the solution {self.config.solution}: {error}") from None
        verdict = check_source(self.source, self.config.solution.name, allow_nccl=self.config.allow_nccl)
        if not verdict.ok:
            raise verdict

    def _start(self) -> None:
        config = self.config
        if config.device != "cpu":
            self.device_name = gpu_model_name() or "unknown-gpu"
        self.reference, self.candidate = self.group_source.acquire(self)
        self.groups = [self.reference, self.candidate]
        self.candidate.watch_memory(config.rank_memory_bytes(), config.workdir_bytes())
        self.candidate_dir = self.candidate.workdir
        shutil.copyfile(self.workdir / config.solution, self.candidate_dir / "solution.py")
        # delivered where the ranks can read but not write: in their own work dir the parent (root) would
        # follow whatever link they put there (tests/fixtures/hostile/compile_deputy_symlink.py)
        self.compile_server = CompileServer(self.cache_root / "compile", self.secret, packages_dir(self.candidate_dir) / "build")
        self.candidate.compile_server = self.compile_server
        self.report.isolation = list(self.candidate.process.measures)
        if shared_shm.sweep_wanted(self.report.isolation):  # what earlier evaluations' candidates left, before this one's code runs
            shared_shm.sweep()
            self.report.isolation.append("swept-shm")
        # the judge's own torch (and the device digest's kernel, where the parent re-hashes on its GPU) while the ranks start
        importing = threading.Thread(target=_import_torch, args=(self._scheme == "tree",), daemon=True)
        importing.start()
        if self.reference.overheads is None:
            self.reference.took_ready(self._expect(self.reference.collect(m.Ready, config.timeouts.startup_s, "reference start-up"),
                                                   "reference"))
        if self.candidate.overheads is None:
            self.candidate.took_ready(self._candidate(self.candidate.collect(m.Ready, config.timeouts.startup_s, "start-up")))
        importing.join()
        if config.device == "cuda" and config.world > 1 and not (self.reference.device_barrier and self.candidate.device_barrier):
            self.report.notes.append("ranks were aligned by the harness's messages only (no device barrier): timings of short "
                                     "calls carry the ranks' start skew")
        if walls_ranks_off(config.device, config.world) and not self.candidate.walled_off:
            self.report.notes.append(WALL_MISSING_NOTE)

    # ------------------------------------------------------------------ failures
    def _expect(self, answers: list[Answer | RankFailure], role: str) -> list[Answer]:
        """The reference's answers; a reference failure says what the reference could not do."""
        for answer in answers:
            if isinstance(answer, RankFailure):
                close_answers(answers)
                text = answer.text or self.reference.rank_log(answer.rank)
                raise Verdict("crashed", reference_failure_message(answer, text), logs=[LogExcerpt.of(f"{role} rank {answer.rank}", text)])
        return answers  # type: ignore[return-value]

    def _candidate(self, answers: list[Answer | RankFailure]) -> list[Answer]:
        if self.compile_server is not None and self.compile_server.refused:  # a banned build asked for, caught or not
            close_answers(answers)
            raise Verdict("rejected", self.compile_server.refused)
        failures = [a for a in answers if isinstance(a, RankFailure)]
        if not failures:
            return answers  # type: ignore[return-value]
        close_answers(answers)
        primary = next((f for f in failures if "after another rank failed" not in f.message), failures[0])
        verdicts = [RankVerdict(rank=a.rank, ok=not isinstance(a, RankFailure), message=getattr(a, "message", ""))
                    for a in answers]
        if self.candidate.stopped_for:
            raise Verdict("crashed", self.candidate.stopped_for, ranks=verdicts)
        if primary.kind == "violation":
            raise Verdict("rejected", f"rank {primary.rank}: {primary.message}", ranks=verdicts)
        if primary.kind == "build":
            raise Verdict("build_failed", f"rank {primary.rank}: {primary.message}", ranks=verdicts,
                          build_log=LogExcerpt.of("build", primary.text, keep_chars=6000))
        message = f"rank {primary.rank} crashed: {primary.message}"
        if "error_on_collective" in primary.message or "FakeProcessGroup collective" in primary.message:
            message = (f"rank {primary.rank} called a torch.distributed collective, and this run does not allow them "
                       "(--allow-nccl is off): write the communication yourself")
        raise Verdict("crashed", message, ranks=verdicts,
                      logs=[LogExcerpt.of(f"rank {primary.rank} traceback", primary.text)] if primary.text else [])

    # ------------------------------------------------------------------ build
    def _build(self) -> None:
        timeout = self.config.timeouts.build_s
        if self.config.is_timed():  # before any candidate code runs: the harness's own cost in each group, the reference alone
            self._load_reference(timeout)
            with self.group_source.quiet():
                if self.config.device == "cuda":
                    self._calibrate()
                self._time_reference_alone()
        elif not self.reference.loaded:
            for rank in range(self.config.world):
                self.reference.send(rank, {"type": "load"})
        answers = self.candidate.ask({"type": "load", "path": str(self.candidate_dir / "solution.py"),
                                      "sys_path": self._candidate_path()}, m.Loaded, timeout, "build")
        if not self.reference.loaded:  # judged first: a reference that cannot load here explains a candidate that cannot either
            try:
                self._load_reference(timeout, sent=True)
            except BaseException:
                close_answers(answers)
                raise
        self._candidate(answers)

    def _load_reference(self, timeout: float, sent: bool = False) -> None:
        if self.reference.loaded:
            return
        if not sent:
            for rank in range(self.config.world):
                self.reference.send(rank, {"type": "load"})
        self._expect(self.reference.collect(m.Loaded, timeout, "reference load"), "reference")
        self.reference.loaded = True

    def _calibrate(self) -> None:
        """What the harness's own work in a timed call (staging the inputs; unmasking them, the
        flush after, the syncs, the commitment to outputs and inputs, the messages) costs in each group's processes,
        measured before any candidate code exists. On the H200 it differs from process to process
        (by up to 5 ms a call at 64 MB, either way), and the clock check compares the two groups'
        unaccounted time: without this an honest candidate in a slower process read as hiding work.
        Not on the host CPU, where what a busy machine adds swamps what is measured here."""
        count = min(self._round_size[0], CALIBRATION_CALLS)
        with self._made(self.plan.fresh_keys(count), {0}, list(range(1800, 1800 + count))) as calls:
            output_bytes = max(_nbytes(e.shapes[:e.outputs], e.dtypes[:e.outputs]) for e in calls[0].expected)
            for _ in range(-(-CALIBRATION_CALLS // count)):
                for group, series in ((self.reference, self.reference_calibration), (self.candidate, self.candidate_calibration)):
                    round_id = self._next_round()
                    record = timing.Round(stage_ms=self._stage(group, round_id, calls, "calibration"))
                    for index in range(count):
                        self._prime(group, "calibration")
                        started = time.perf_counter()
                        asked = group.ask(
                            {"type": "calibrate", "round": round_id, "index": index, "output_bytes": output_bytes, "flush": True,
                             "nonce": calls[index].nonce.hex(), "mask": calls[index].mask},
                            m.Calibrated, self.config.timeouts.correctness_s, "calibration")
                        record.wall_ms.append((time.perf_counter() - started) * 1000.0)
                        close_answers(asked)  # the stand-in's sealed copies: made as a call's are, never compared
                        answers = self._checked(group, asked)
                        record.claimed_ms.append([a.reply.ms for a in answers])
                    self._drop(group, round_id)
                    series.rounds.append(record)

    def _time_reference_alone(self) -> None:
        """A warm-up round and as many timed calls as the interleaved timing plans, of the reference
        with no candidate code anywhere yet: work a candidate leaves running on the device or the
        host between its own rounds slows the interleaved reference rounds, never this one. Every
        round stages the same inputs afresh: the reference is not the one that could gain from
        seeing them again, and each round's staged copy is new memory either way; the reference
        makes a round's inputs once instead of once a round (at 64 MiB a call, 4 blobs instead of
        20, each 64 MiB of fresh host pages). A kept reference group of a long-lived harness may
        have it from an earlier evaluation (sandbox/harness/warm.py KEEP_ALONE)."""
        size, target = self._round_size
        plan = (size, target, self._flushes)  # the rounds kept (the warm-up round is not), each call after its warm-up
        kept = kept_alone(self.reference, plan, self.config.device)
        if kept is not None:
            self.reference_alone = timing.Series(self._empty_interval_ms, kept.rounds)
            self.report.reference_alone_age_s = round(time.monotonic() - kept.measured_at, 3)
            device_ms = kept.device_ms
        else:
            series = self.reference_alone = timing.Series(self._empty_interval_ms)
            counts = [min(max(self.config.warmup, 1), size)] + [size] * max(MIN_ROUNDS, -(-target // size))
            with self._made(self.plan.fresh_keys(size), set(), list(range(1900, 1900 + size))) as calls:
                for index, count in enumerate(counts):  # as many calls as the interleaved timing plans: one round read as
                    record = self._timed_round(self.reference, calls[:count], [])  # slowed an honest candidate's reference
                    if index:  # (a 1.39x spread over 5 jobs on the H200)
                        series.rounds.append(record)
                device_ms = self._reference_device_ms(calls[:DEVICE_TIME_CALLS])
            keep_alone(self.reference, plan, series.rounds, device_ms)
        self.report.reference_alone_ms = round(statistics.median(self.reference_alone.steps()), 6)
        self._note_host_bound(device_ms)

    def _reference_device_ms(self, calls: list[Call]) -> float | None:
        """The reference's median device time a call, its launch hidden behind the flushes
        (``RankDevice.timed_ahead``; the slowest rank's, call by call), on a GPU only. The timed
        calls hold the host's launch and sync too, which for a short call can be most of it."""
        if self.config.device != "cuda" or not self._flushes:
            return None
        round_id = self._next_round()
        self._stage(self.reference, round_id, calls, "reference device time")
        per_call = []
        for index, call in enumerate(calls):
            answers = self.reference.ask({"type": "call", "round": round_id, "index": index, "rng": call.rng,
                                          "nonce": call.nonce.hex(), "mask": call.mask, "ahead": self._flushes},
                                         m.Done, self.config.timeouts.correctness_s, "reference device time")
            close_answers(answers)
            per_call.append(max(a.reply.ms for a in self._checked(self.reference, answers)))
        self._drop(self.reference, round_id)
        return round(statistics.median(per_call), 6)

    def _note_host_bound(self, device_ms: float | None) -> None:
        """The reference's device time in the report, and a note where its call is mostly the host's."""
        self.report.reference_device_ms = device_ms
        note = timing.host_bound_note(device_ms, self.report.reference_alone_ms)
        if note:
            self.report.notes.append(note)

    def _candidate_path(self) -> list[str]:
        paths = [str(self.candidate_dir)]
        if self.problem.compat == "pkb":  # candidates written for ParallelKernelBench import its utils.cuda_helpers
            from kloop_runtime import pkb_shim

            staged = packages_dir(self.candidate_dir) / pkb_shim.ROOT.relative_to(pkb_shim.ROOT.parents[1])  # the rank's own copy
            paths.append(str(staged if staged.is_dir() else pkb_shim.ROOT))
        return paths

    # ------------------------------------------------------------------ calls
    def _make(self, keys: list[int], checked: set[int], labels: list[int], native: bool = False,
              perturb: list[int | None] | None = None) -> list[Call]:
        """The reference draws each call's inputs (and, for the ``checked`` ones, its expectations),
        in the problem's input regimes in turn by label: the correctness trials cover every one.
        Asked MAX_CALLS_PER_MAKE calls at a time (a reply's descriptors are bounded)."""
        calls = [Call(label=label, key=key, rng=self.plan.rng(key)) for label, key in zip(labels, keys)]
        regimes = self.problem.spec.regimes
        perturb = perturb or [None] * len(calls)
        try:
            for start in range(0, len(calls), MAX_CALLS_PER_MAKE):
                batch = calls[start:start + MAX_CALLS_PER_MAKE]
                message = {"type": "make", "calls": [
                    {"key": c.key, "regime": c.label % regimes, "rng": c.rng, "expect": start + i in checked, "native": native,
                     "perturb": perturb[start + i], "mask": c.mask} for i, c in enumerate(batch)]}
                answers = self._expect(self.reference.ask(message, m.Made, self.config.timeouts.correctness_s, "reference inputs"),
                                       "reference")
                try:
                    with self._parent_work("reading expected outputs"):
                        self._read_made(batch, answers)
                finally:
                    close_answers(answers)
        except BaseException:
            for call in calls:
                call.close()
            raise
        if self.config.device == "cuda" and MEMFD_INPUTS_NOTE not in self.report.notes and any(
                inputs.lent is None for call in calls for inputs in call.inputs):
            self.report.notes.append(MEMFD_INPUTS_NOTE)
        return calls

    def _read_made(self, calls: list[Call], answers: list[Answer]) -> None:
        """Each call's inputs (a blob, or a device blob's header and its two allocations) and
        expectation from every reference rank's reply."""
        device = self._compare_device()
        for answer in answers:
            if len(answer.reply.calls) != len(calls):
                raise RuntimeError(f"reference rank {answer.rank} made {len(answer.reply.calls)} calls of {len(calls)}")
            for call, summary in zip(calls, answer.reply.calls):
                call.inputs.append(Inputs.taken(summary, answer.fds))
                call.expected.append(Expected.read(summary, answer.fds, device) if summary["expect"] else None)

    @contextlib.contextmanager
    def _made(self, *args: Any, **kwargs: Any):
        """``_make``'s calls, closed when the block ends."""
        calls = self._make(*args, **kwargs)
        try:
            yield calls
        finally:
            for call in calls:
                call.close()

    def _stage(self, group: RankGroup, round_id: int, calls: list[Call], stage: str) -> float:
        """A round's inputs to every rank of ``group``: on the CPU as views of copies the parent
        keeps (sandbox/harness/staged_inputs.py), on a device as the reference's sealed blobs."""
        shared = self.config.device == "cpu"
        if shared:
            with self._parent_work("staging inputs"):
                staged = self.staged[round_id] = staged_inputs.stage_copies(calls, self.config.world)
                fds = staged.fds
        else:
            fds = [[fd for call in calls for fd in call.inputs[rank].for_group(trusted=group is self.reference)]
                   for rank in range(self.config.world)]
        started = time.perf_counter()
        # masked until the call: the shared copies above, and on a GPU whatever the reference made (device blobs, or
        # memfds where the driver refuses them: sandbox/harness/reference_rank.py _input_blob); emulation's are not
        masked = shared or self.config.device == "cuda"
        answers = group.ask({"type": "stage", "round": round_id, "shared": shared, "masked": masked}, m.Staged,
                            self.config.timeouts.correctness_s, stage, fds=fds)
        wall = (time.perf_counter() - started) * 1000.0
        self._checked(group, answers)
        return wall

    def _checked(self, group: RankGroup, answers: list[Answer | RankFailure]) -> list[Answer]:
        return self._candidate(answers) if group is self.candidate else self._expect(answers, "reference")

    def _call(self, group: RankGroup, round_id: int, index: int, call: Call, stage: str,
              flush: bool) -> tuple[list[float], list[Commitment], float]:
        """One timed call on every rank: (claimed ms per rank, commitments per rank, the parent's wall ms).
        With ``flush``, the warm-up before it (``_prime``) stays outside the parent's clock."""
        if flush:
            self._prime(group, stage)
        started = time.perf_counter()
        answers = group.ask({"type": "call", "round": round_id, "index": index, "rng": call.rng, "nonce": call.nonce.hex(),
                             "mask": call.mask, "flush": flush}, m.Done, self.config.timeouts.correctness_s, stage)
        wall = (time.perf_counter() - started) * 1000.0
        with _closed_on_error(answers):
            done = self._checked(group, answers)
            for answer in done:
                if answer.reply.round != round_id or answer.reply.index != index:
                    raise m.ProtocolViolation(f"rank {answer.rank} answered for another call")
            committed = self._commitments(done, [[a.reply.checksum for a in done]])[0]
        with _closed_on_error([], [committed]):
            if group is self.candidate:
                self._check_inputs(round_id, [call], index)
        return [a.reply.ms for a in done], committed, wall

    def _commitments(self, done: list[Answer], checksums: list[list[str]]) -> list[list[Commitment]]:
        """``checksums[i][r]`` (call i, rank r) with rank r's sealed copy of call i's bytes, taken off
        ``done``: one a call where the group's scheme is the transposed one (sandbox/rank/commitment.py), else none."""
        rows = [[Commitment(checksum) for checksum in row] for row in checksums]
        due = len(rows) if self._scheme == "transposed" else 0
        with _closed_on_error(done, rows):
            for answer in done:
                fds, answer.fds = answer.fds, []
                for position, fd in enumerate(fds):
                    if position < due:
                        rows[position][answer.rank].sealed = fd
                    else:
                        close_received(fd)
                if len(fds) != due:
                    raise m.ProtocolViolation(f"rank {answer.rank} sent {len(fds)} sealed copies of its calls' bytes where "
                                              f"{due} were due")
        return rows

    def _prime(self, group: RankGroup, stage: str) -> None:
        """The warm-up before a timed call (the L2 flush kept up for about the config's warm_up_ms, sandbox.rank.device),
        on every rank of ``group``, before the parent's clock starts: a candidate's process that
        skips it has no time under that clock to show for it (its inputs are masked until the call:
        tests/fixtures/hostile/flush_skipped_hides_work.py)."""
        if self._flushes:
            self._checked(group, group.ask({"type": "prime", "flushes": self._flushes}, m.Primed, self.config.timeouts.correctness_s,
                                           stage))

    def _burst(self, group: RankGroup, round_id: int, calls: list[Call], start: int, stage: str) -> list[list[Commitment]]:
        asked = group.ask({"type": "burst", "round": round_id, "start": start, "rng": [c.rng for c in calls],
                           "nonce": [c.nonce.hex() for c in calls], "mask": [c.mask for c in calls]},
                          m.BurstDone, self.config.timeouts.correctness_s, stage)
        count = len(calls) - start
        with _closed_on_error(asked):
            answers = self._checked(group, asked)
            if any(len(a.reply.checksums) != count for a in answers):
                raise m.ProtocolViolation("a rank committed to the wrong number of back-to-back calls")
            committed = self._commitments(answers, [[a.reply.checksums[i] for a in answers] for i in range(count)])
        with _closed_on_error([], committed):
            if group is self.candidate:
                self._check_inputs(round_id, calls[start:], start)
        return committed

    def _reveal(self, round_id: int, calls: list[Call], indices: list[int], stage: str) -> list[list[Revealed]]:
        """What each rank shows of ``calls`` (the round's calls at ``indices``), each blob refused
        unread when it is larger than the call's inputs and expected outputs allow."""
        answers = self._candidate(self.candidate.ask({"type": "reveal", "round": round_id, "indices": indices}, m.Revealed,
                                                     self.config.timeouts.correctness_s, stage))
        shown: list[list[Revealed]] = [[] for _ in indices]
        # where the tree is the scheme, read straight to the device it is hashed and compared on (one copy, no host SHA-256)
        device = self._compare_device() if self._scheme == "tree" else None
        with self._parent_work("reading revealed outputs"), contextlib.ExitStack() as cleanup:
            cleanup.callback(close_answers, answers)
            for answer in answers:
                if answer.reply.indices != indices:
                    raise m.ProtocolViolation(f"rank {answer.rank} revealed other calls than those asked for")
                for position in range(len(indices)):
                    try:
                        shown[position].append(Revealed.read(answer.fds, reveal_limit(calls[position], answer.rank), device))
                    except MemoryError:  # the blob is bounded by reveal_limit: running out is the parent's trouble
                        raise
                    except Exception as error:  # noqa: BLE001 - whatever a rank's bytes make torch raise is the rank's
                        # Not only the wire's own refusals: torch raises RuntimeError (and who knows what else) on
                        # descriptions the checks let through (tests/fixtures/hostile/reveal_zero_size_overflowing_shape.py).
                        log.info("revealed_blob_unreadable", rank=answer.rank, error_type=type(error).__name__, error=str(error)[:200])
                        kind = "" if isinstance(error, wire.WireError) else f"{type(error).__name__}: "
                        raise m.ProtocolViolation(f"a revealed call could not be read: {kind}{str(error)[:200]}") from None
                if answer.fds:
                    raise m.ProtocolViolation(f"rank {answer.rank} sent more descriptors than the calls it revealed")
        return shown

    def _check_inputs(self, round_id: int, calls: list[Call], start: int) -> None:
        """The staged inputs of ``calls`` (the round's calls from ``start`` on), as the parent's
        own copies hold them right after the calls ended: unchanged on every checked call, and
        mapped by no process of the candidate's tree privately. Done alike after every call,
        checked or not (sandbox/harness/staged_inputs.py). The candidate's processes are stopped
        meanwhile: the round's later calls are staged already, and the time this takes (which the
        candidate can stretch, with mappings to read) is outside any call's wall time, so a thread
        left running computed the next call in it (tests/fixtures/hostile/work_between_calls_maps_gap.py)."""
        staged = self.staged.get(round_id)
        if staged is None:
            return  # on a device: the inputs are the rank's own memory (judged from what it reveals)
        with self._candidate_paused("while its inputs were checked: work it leaves running may use that time"), \
                self._parent_work("checking inputs"):
            try:
                staged_inputs.check_mappings(self.candidate.process.pid, staged.files)
            except staged_inputs.PrivateMapping as error:
                raise m.ProtocolViolation(str(error)) from None
            staged_inputs.check_inputs(calls, [views[start:start + len(calls)] for views in staged.views], self.problem.spec.in_place)

    def _drop(self, group: RankGroup, round_id: int) -> None:
        self._checked(group, group.ask({"type": "drop", "round": round_id}, m.Dropped, self.config.timeouts.correctness_s, "drop"))
        staged = self.staged.pop(round_id, None)
        if staged is not None:
            staged.close()

    def _next_round(self) -> int:
        self.rounds += 1
        return self.rounds

    def _compare_device(self):
        import torch

        return torch.device("cuda", 0) if self.config.device != "cpu" and torch.cuda.is_available() else torch.device("cpu")

    def _judge(self, calls: list[Call], revealed: list[list[Revealed]], committed: list[list[Commitment]],
               **hints: Any) -> list[RankVerdict]:
        with self._parent_work("judging"):
            return judge(calls, revealed, committed, self.problem.spec, self._compare_device(),
                         self._scheme, **hints)

    # ------------------------------------------------------------------ stages
    def _correctness(self) -> None:
        """Every trial checked: the first call isolated (synced and aligned), the rest back to back,
        in rounds of at most MAX_ROUND_CALLS (a round's inputs, blobs and sealed copies travel in one
        message each, of at most wire.MAX_FDS descriptors: 70 trials crashed the harness)."""
        trials = self.config.trials
        calls = self._make(self.plan.trial_keys(), set(range(trials)), list(range(trials)))
        committed: list[list[Commitment]] = []
        revealed: list[list[Revealed]] = []
        try:
            self._note_weak_inputs(calls)
            for start in range(0, trials, MAX_ROUND_CALLS):
                batch = calls[start:start + MAX_ROUND_CALLS]
                round_id = self._next_round()
                self._stage(self.candidate, round_id, batch, "correctness")
                if start == 0:
                    _, first, _ = self._call(self.candidate, round_id, 0, batch[0], "correctness", flush=False)
                    committed.append(first)
                if len(batch) > (start == 0):
                    committed += self._burst(self.candidate, round_id, batch, int(start == 0), "correctness")
                revealed += self._reveal(round_id, batch, list(range(len(batch))), "correctness")
                self._drop(self.candidate, round_id)
            self.report.ranks = self._judge(calls, revealed, committed, back_to_back_from=1)
        finally:
            close_commitments(committed)
            for call in calls:
                call.close()

    def _stress(self) -> None:
        done, batch = 0, MAX_ROUND_CALLS
        while done < self.config.stress_calls:
            count = min(batch, self.config.stress_calls - done)
            calls = self._make(self.plan.fresh_keys(count), set(range(count)), list(range(1000 + done, 1000 + done + count)))
            committed = []
            try:
                round_id = self._next_round()
                self._stage(self.candidate, round_id, calls, "stress")
                committed = self._burst(self.candidate, round_id, calls, 0, "stress")
                revealed = self._reveal(round_id, calls, list(range(count)), "stress")
                self._drop(self.candidate, round_id)
                self._judge(calls, revealed, committed, note=f"wrong within back-to-back calls {done + 1}-{done + count} of the "
                            f"stress run ({self.config.stress_calls} calls); the correctness trials before it passed")
            finally:
                close_commitments(committed)
                for call in calls:
                    call.close()
            done += count
        self.report.notes.append(f"stress: {done} back-to-back calls on fresh inputs, all outputs checked")

    def _performance(self) -> None:
        """Interleaved timed rounds, checked against the parent's clock. A check that fails is
        timed once more from scratch: a busy machine can push one series of honest calls past the
        bound, but work hidden from the timer is hidden both times (the verdict is then rejected)."""
        size, target = self._round_size
        self._timed_round_pair(min(max(self.config.warmup, 1), size), None, None, 0)  # warm-up: kept out of the numbers
        for attempt in range(CLOCK_ATTEMPTS):
            reference, candidate = self._timed_series(size, target)
            try:
                self.report.timing_check = timing.check_clock(candidate, reference, self.config.device,
                                                              self.candidate_calibration, self.reference_calibration,
                                                              self.reference_alone if self._slowed(reference) else None)
                break
            except timing.TimingRejected as rejected:
                if attempt + 1 == CLOCK_ATTEMPTS:
                    raise Verdict("rejected", f"{rejected} (in each of {CLOCK_ATTEMPTS} separate timings)") from None
                self.report.notes.append(f"timing repeated: the first timing failed the clock check ({rejected})")
        self.report.reference_timing = self._timing(reference)
        self.report.candidate_timing = self._timing(candidate)
        verified, note = timing.reported_ms(self.report.candidate_timing.median_ms, self.report.timing_check)
        if note:
            self.report.notes.append(note)
        if verified is not None:
            self.report.candidate_timing.median_ms = verified
        ref_ms, cand = self._reference_ms(reference), self.report.candidate_timing
        resolution = timing.FLOOR_MS.get(self.config.device, timing.FLOOR_MS["cpu"])
        if ref_ms < resolution:
            self.report.notes.append(f"the reference's call ({ref_ms:.4f} ms beyond the empty timed interval) is below what "
                                     f"the timer resolves ({resolution} ms): no speedup is reported; time a larger size (--size)")
        elif verified is None:
            pass  # the clock resolved nothing (the note says so)
        elif cand.median_ms <= 0:
            self.report.notes.append("no speedup is reported: the candidate's calls took no time the timer resolves beyond the "
                                     "empty timed interval, and the parent's clock gives no estimate either")
        else:
            self.report.speedup = round(ref_ms / cand.median_ms, 4)
            interval = timing.speedup_interval(reference, candidate, reported=ref_ms / cand.median_ms)
            if interval is None:
                self.report.notes.append("no interval for the speedup: the candidate's claimed times give none (all zero); "
                                         "its time per call was read on the parent's clock")
            else:
                low, high = interval
                self.report.speedup_ci = [round(low, 4), round(high, 4)]
                precision = self.config.resolved_timing_precision()
                if precision and (high - low) / 2 > precision * self.report.speedup:
                    self.report.notes.append(
                        f"the speedup's 95% interval ({low:.3f}-{high:.3f}) is wider than the precision asked (+-{precision:.0%}) "
                        f"after {cand.iterations} timed calls: {self.timing_stop}; compare it with others by its interval, "
                        "not its point")
        self._roofline(cand)

    def _reference_ms(self, beside_series: timing.Series) -> float:
        """The reference's time per call for the speedup: its interleaved median, or its time alone
        when it ran more than SLOWED_REFERENCE times slower beside the candidate than alone
        (tests/fixtures/hostile/spin_while_reference_runs.py, cuda_spin_during_reference.py)."""
        beside, alone = self.report.reference_timing.median_ms, self.report.reference_alone_ms
        if not alone or not self._slowed(beside_series):
            return beside
        drop_alone(self.reference)  # measured again in the next evaluation: the candidate, or a machine that changed pace
        self.report.notes.append(f"the reference ran {beside / alone:.2f}x slower beside the candidate ({beside:.4f} ms a call) than "
                                 f"alone before the candidate was loaded ({alone:.4f} ms): the speedup is taken against the "
                                 "reference alone (work left running on the device or the host between calls slows the reference)")
        return alone

    def _slowed(self, beside: timing.Series) -> bool:
        """Whether the reference ran SLOWED_REFERENCE times slower beside the candidate than alone."""
        return self.reference_alone is not None and timing.slowed(
            beside.steps(), self.reference_alone.steps(), SLOWED_REFERENCE.get(self.config.device, 2.0))

    def _timed_series(self, size: int, target: int) -> tuple[timing.Series, timing.Series]:
        """Interleaved round pairs until ``timing.stop_reason`` gives one (kept in ``timing_stop``):
        the planned ``target`` calls, then more, up to MAX_TIMED_FACTOR times them."""
        reference = timing.Series(self._empty_interval_ms)
        candidate = timing.Series(self._empty_interval_ms)
        deadline = time.monotonic() + self.config.timing_budget_s
        precision, most = self.config.resolved_timing_precision(), MAX_TIMED_FACTOR * target
        pair = 0
        while True:
            pair += 1
            self._timed_round_pair(size, reference, candidate, pair)
            if pair >= MIN_ROUNDS:
                self.timing_stop = timing.stop_reason(reference, candidate, precision, target, most, time.monotonic() > deadline)
                if self.timing_stop is not None:
                    return reference, candidate

    @functools.cached_property
    def _scheme(self) -> str:
        """How the candidate's ranks commit to a call's outputs (sandbox/rank/commitment.py)."""
        return commitment.scheme(self.config.world, self.config.device)

    @property
    def _flushes(self) -> int:
        """L2 flushes before a timed call, in both groups: as many as keep the GPU busy for the
        config's ``warm_up_ms`` by the reference's measure of one, so that the harness's work in a
        call is the same in both (each process counted its own before; in 15 H200 jobs on
        2026-12-04 the two counts never differed, so this rules a difference out rather than
        explaining one seen)."""
        return flushes_for(self.config.warm_up_ms, self.reference.flush_ms)

    @property
    def _l2_policy(self) -> str:
        if self.config.device != "cuda":
            return "not flushed (cpu)"
        own = flushes_for(self.config.warm_up_ms, self.candidate.flush_ms)
        measured = "" if own == self._flushes else f"; the candidate's processes measured {own}"
        return (f"flushed before every call ({self._flushes} times to keep the GPU busy about {self.config.warm_up_ms:g} ms, then "
                f"once after its inputs are unmasked, in both groups{measured})")

    @functools.cached_property
    def _empty_interval_ms(self) -> list[float]:
        """Each rank's empty timed interval, taken off every timed call of either group: on a GPU
        from this evaluation's calibration (its empty intervals, each after an unmasking and a
        flush as a call's, in both groups before any candidate code, while no group starts beside
        them), else from the groups' start-up. A start-up measure is taken once, under whatever ran
        beside it then (a warm evaluator starts candidate groups ahead, each starting CUDA): on the
        H200 on 2026-12-06 the honest copy and the reference at all_reduce's latency size (128 KiB)
        read no time at all beyond it in two runs, where at the small size (24 KiB) they read
        0.14 ms, and the copy was rejected as faster than the hardware."""
        if not (self.reference_calibration.rounds and self.candidate_calibration.rounds):
            return timing.empty_interval(self.reference.overheads, self.candidate.overheads)
        return timing.empty_interval(self.reference_calibration.per_rank_medians(), self.candidate_calibration.per_rank_medians())

    @functools.cached_property
    def _round_size(self) -> tuple[int, int]:
        """Calls per timed round, and timed calls in all: ``iterations``, fewer where the inputs
        are so large that staging them would take far longer than the calls (one probe call per
        evaluation: the calibration, the reference alone and the timing all ask)."""
        with self._made(self.plan.fresh_keys(1), set(), [0]) as probe:
            nbytes = max(held.nbytes for held in probe[0].inputs)
        target = max(MIN_ROUNDS, min(self.config.iterations, TIMED_BYTES[self.config.device] // max(nbytes, 1)))
        return max(1, min(MAX_ROUND_CALLS, ROUND_BYTES // max(nbytes, 1), -(-target // MIN_ROUNDS))), target

    def _timed_round_pair(self, count: int, reference: timing.Series | None, candidate: timing.Series | None, pair: int) -> None:
        checked = set(self.plan.checked(count, CHECKED_SHARE))
        base = 2000 + 100 * pair
        with self._made(self.plan.fresh_keys(count), checked, list(range(base, base + count))) as calls:
            groups = [(self.reference, reference), (self.candidate, candidate)]
            for group, series in (groups if pair % 2 else groups[::-1]):
                record = self._timed_round(group, calls, sorted(checked) if group is self.candidate else [])
                if series is not None:
                    series.rounds.append(record)

    def _timed_round(self, group: RankGroup, calls: list[Call], reveal: list[int]) -> timing.Round:
        """One group's timed round; the candidate's processes are stopped while the reference's
        runs, so nothing it left running shares the host with it (sandbox/jail/pause.py)."""
        if group is self.candidate:
            return self._timed_round_of(group, calls, reveal)
        with self._candidate_paused("while the reference was timed: work it leaves running may slow the reference"):
            return self._timed_round_of(group, calls, reveal)

    @contextlib.contextmanager
    def _candidate_paused(self, consequence: str):
        """The candidate's processes stopped for the block; ``rejected`` when they could not be. An
        honest tree stops within the pause's wait (a thread asleep in uninterruptible sleep counts
        as stopped: sandbox/jail/pause.py); one that does not was made so (a thread kept running in
        the kernel, a tree that keeps forking), and with only a note the reference was timed beside
        whatever it left running (tests/fixtures/hostile/pause_dodged_by_zombie_leader.py: 1.75x on
        the reference's own work)."""
        with contextlib.ExitStack() as stack:
            with self._parent_work("stopping the candidate"):
                failed = stack.enter_context(self.candidate.paused())
            if failed:
                raise Verdict("rejected", f"{PAUSE_FAILED} ({failed}) {consequence}: a solution must leave no process "
                              "the judge cannot stop")
            yield

    def _timed_round_of(self, group: RankGroup, calls: list[Call], reveal: list[int]) -> timing.Round:
        stage = "performance" if group is self.candidate else "reference timing"
        round_id = self._next_round()
        record = timing.Round(stage_ms=self._stage(group, round_id, calls, stage))
        kept: list[list[Commitment]] = []  # those of the calls to reveal; the others' sealed copies closed at once
        try:
            for index, call in enumerate(calls):
                claims, commitments, wall = self._call(group, round_id, index, call, stage, flush=True)
                record.claimed_ms.append(claims)
                record.wall_ms.append(wall)
                kept.append(commitments)
                if index not in reveal:
                    close_commitments([commitments])
            if reveal:
                revealed = self._reveal(round_id, [calls[i] for i in reveal], reveal, stage)
                self._judge([calls[i] for i in reveal], revealed, [kept[i] for i in reveal],
                            note="wrong on a call checked during timing, though correct on the trials: outputs that depend on "
                                 "being timed, repeated or counted")
        finally:
            close_commitments(kept)
        self._drop(group, round_id)
        return record

    def _timing(self, series: timing.Series) -> Timing:
        steps = series.steps()
        quartiles = statistics.quantiles(steps, n=4) if len(steps) > 1 else [steps[0]] * 3
        return Timing(median_ms=round(statistics.median(steps), 6), iqr_ms=round(quartiles[2] - quartiles[0], 6),
                      min_ms=round(min(steps), 6), per_rank_median_ms=[round(v, 6) for v in series.per_rank_medians()],
                      iterations=len(steps), warmup=min(max(self.config.warmup, 1), len(series.rounds[0].wall_ms)),
                      input_sets=len(steps), sync_overhead_ms=round(max(series.overheads_ms), 6), rounds=len(series.rounds),
                      l2_policy=self._l2_policy)

    def _roofline(self, cand: Timing) -> None:
        if self.config.device != "cuda":
            return
        topo = topology.host_topology(self.config.world, self.device_name, self.cache_root)
        cost = self.problem.cost_at(self.config.world, self.size, self.dtype)
        bound = topology.roofline_for(topo, cost)
        if bound is None:
            return  # the problem has no cost model (e.g. ParallelKernelBench's): no roofline
        impossible = timing.faster_than_hardware(cand.median_ms, bound)
        if impossible:
            raise Verdict("rejected", impossible)
        self.report.roofline = bound
        self.report.roofline_fraction = round(bound.bound_ms / cand.median_ms, 4) if cand.median_ms else None
        if cost.comm_bytes and cand.median_ms:
            self.report.achieved_comm_gbps = round(cost.comm_bytes / (cand.median_ms * 1e-3) / 1e9, 2)
        self._analyse()

    def _analyse(self) -> None:
        report = self.report
        if report.roofline is None:
            return
        if report.candidate_timing is not None:
            report.analysis = performance.analyse(report.candidate_timing, report.roofline, report.profile)
        if report.reference_timing is not None:
            report.reference_analysis = performance.analyse(report.reference_timing, report.roofline, report.reference_profile)

    def _recheck(self) -> None:
        key = self.plan.recheck_key()
        label = self.config.trials
        calls = self._make([key], {0}, [label])
        committed: list[list[Commitment]] = []
        try:
            round_id = self._next_round()
            self._stage(self.candidate, round_id, calls, "recheck")
            _, first, _ = self._call(self.candidate, round_id, 0, calls[0], "recheck", flush=False)
            committed.append(first)
            revealed = self._reveal(round_id, calls, [0], "recheck")
            self._drop(self.candidate, round_id)
            self._judge(calls, revealed, committed, note="correct before timing, wrong on fresh inputs after many calls: state "
                        "that drifts across calls (counters, flags, cached buffers)?" if self.config.is_timed() else None)
        finally:
            close_commitments(committed)
            calls[0].close()

    # ------------------------------------------------------------------ profile
    def _profile(self) -> None:
        cache = SealedCache(self.cache_root / "profiles", self.secret)
        identity = {"problem": self.problem.name, "version": self.problem.source_hash(), "world": self.config.world,
                    "size": self.size, "dtype": self.dtype, "device": self.config.device, "gpu": self.device_name}
        ref_key = cache_key(role="reference", **identity)
        cand_key = cache_key(role="candidate", source=hashlib.sha256(self.source.encode()).hexdigest(), **identity)
        use = self.config.profile_cache
        cached_ref, cached_cand = (cache.load(ref_key), cache.load(cand_key)) if use else (None, None)
        self.report.reference_profile = ProfileSummary(**cached_ref) if cached_ref else self._profile_group(self.reference)
        self.report.profile = ProfileSummary(**cached_cand) if cached_cand else self._profile_group(self.candidate)
        self.report.profile_cache = "off" if not use else ("hit" if cached_ref and cached_cand else "miss")
        for key, cached, summary in ((ref_key, cached_ref, self.report.reference_profile), (cand_key, cached_cand, self.report.profile)):
            if use and summary is not None and not cached:
                cache.store(key, summary.model_dump())
        if self.report.profile is not None and not self.config.allow_nccl:
            nccl = [k.name for k in self.report.profile.kernels if k.name.lower().startswith("nccl")]
            if nccl:
                raise Verdict("rejected", f"NCCL kernels ran in the solution ({nccl[0]}), and this run does not allow NCCL")
        self._analyse()

    def _profile_group(self, group: RankGroup) -> ProfileSummary | None:
        """A few calls of every rank under the profiler; the slowest rank's summary."""
        calls = self._make(self.plan.fresh_keys(PROFILED_CALLS + 1), set(), list(range(PROFILED_CALLS + 1)))
        role = group.role
        try:
            round_id = self._next_round()
            self._stage(group, round_id, calls, f"{role} profile")
            answers = group.ask({"type": "profile", "round": round_id, "rng": calls[0].rng, "mask": [c.mask for c in calls]},
                                m.Profiled, self.config.timeouts.profile_s, f"{role} profile")
            done = [a for a in answers if isinstance(a, Answer)]
            if len(done) != len(answers):
                failure = next(a for a in answers if isinstance(a, RankFailure))
                self.report.notes.append(f"profiling the {role} failed: {failure.message}")
                return None
            self._drop(group, round_id)
        finally:
            for call in calls:
                call.close()
        timing_ = self.report.candidate_timing if role == "candidate" else self.report.reference_timing
        medians = timing_.per_rank_median_ms if timing_ is not None else []
        rank = max(range(len(medians)), key=medians.__getitem__) if len(medians) == len(done) else 0
        reply = done[rank].reply
        activities = [performance.DeviceActivity(name, start, end) for name, start, end in reply.activities]
        wall_us = statistics.median(reply.wall_ms) * 1000.0 if reply.wall_ms else None
        return performance.summarize_activities(activities, max(reply.calls, 1), wall_us, rank)

    # ------------------------------------------------------------------ report
    def _note_weak_inputs(self, calls: list[Call]) -> None:
        if all(e is not None and e.nearly_constant_inputs for call in calls for e in call.expected):
            self.report.notes.append(
                "weak check: on every rank and trial the inputs are nearly constant (each floating input holds at most "
                f"{NEARLY_CONSTANT_DISTINCT} distinct values, e.g. torch.full(rank + 1) as in ParallelKernelBench's collective "
                "primitives), so a solution that does not compute from its inputs could still be judged correct")

    def _success_message(self) -> str:
        parts = [f"correct on all {self.config.world} ranks over {self.config.trials + 1} trials"]
        if self.report.speedup is not None:
            low_high = f" (95% CI {self.report.speedup_ci[0]:.2f}-{self.report.speedup_ci[1]:.2f})" if self.report.speedup_ci else ""
            parts.append(f"{self.report.speedup:.2f}x the reference{low_high}")
        if self.report.roofline_fraction is not None:
            parts.append(f"{100 * self.report.roofline_fraction:.0f}% of the roofline")
        return ", ".join(parts)

    def _attach_logs(self) -> None:
        candidate = next((g for g in self.groups if g.role == "candidate"), None)
        if candidate is None:
            return
        failing = {v.rank for v in self.report.ranks if not v.ok}
        for rank in range(self.config.world):
            text = candidate.rank_log(rank)
            if text.strip() and (rank in failing or rank == 0 or self.report.status in ("crashed", "timeout")):
                self.report.logs.append(LogExcerpt.of(f"candidate rank {rank} output", text, keep_chars=2000))
        launcher = candidate.launcher_log()
        if launcher.strip() and self.report.status in ("crashed", "timeout"):
            self.report.logs.append(LogExcerpt.of("candidate launcher", launcher, keep_chars=2000))


@contextlib.contextmanager
def _closed_on_error(answers: list[Answer | RankFailure], commitments: list[list[Commitment]] = ()):
    """The descriptors ``answers`` carry and the sealed copies of ``commitments`` closed if the block
    raises; the caller's to close otherwise."""
    try:
        yield
    except BaseException:
        close_answers(answers)
        close_commitments(commitments)
        raise


def _nbytes(shapes: list[tuple[int, ...]], dtypes: list[str]) -> int:
    import torch

    return sum(math.prod(shape) * getattr(torch, dtype).itemsize for shape, dtype in zip(shapes, dtypes))


def reveal_limit(call: Call, rank: int) -> int:
    """The most bytes a revealed blob of ``call`` on ``rank`` may have: twice its inputs and the
    reference's outputs (a wrong shape within that is still judged, and said, as wrong), plus room
    for the header. A larger blob is refused before a byte of it is read: the parent would
    otherwise copy whatever size a rank claims (a sealed memfd can be a hole of any size) into
    its own memory (tests/fixtures/hostile/huge_sparse_reveal.py)."""
    expected = call.expected[rank] if rank < len(call.expected) else None
    outputs = sum(math.prod(shape) * wire.ITEMSIZE.get(dtype, 16) for shape, dtype in zip(expected.shapes, expected.dtypes)) \
        if expected is not None else MAX_REVEAL_BYTES // 2
    return min(MAX_REVEAL_BYTES, 2 * (call.inputs[rank].nbytes + outputs) + 2**20)


def _import_torch(device_digest: bool = False) -> None:
    """torch imported; with ``device_digest``, the tree digest's kernel compiled too (device_kernels, NVRTC: about
    1 s on the H200 host, which the first check of a call paid otherwise)."""
    import torch

    if device_digest and torch.cuda.is_available():
        try:
            device_kernels.warm()
        except Exception as error:  # noqa: BLE001 - the judge compiles it again when it needs it, and fails there
            log.warning("device_digest_not_warmed", error=f"{type(error).__name__}: {error}"[:300])


REFERENCE_LIMITS = (  # (text in the failure, what this machine or device mode lacks)
    ("No module named 'triton'", "it needs triton, which is not installed here"),
    ("Torch not compiled with CUDA", "it needs CUDA, and this torch has none"),
    ("No CUDA GPUs are available", "it needs a GPU, and this machine has none"),
    ("Found no NVIDIA driver", "it needs a GPU, and this machine has none"),
    ("no CUDA-capable device", "it needs a GPU, and this machine has none"),
    ("Cannot access accelerator device when none is available", "it needs a GPU, and this machine has none"),
    ("ProcessGroupGloo", "gloo (the CPU backend) cannot run one of its collectives"),
    ("gloo", "gloo (the CPU backend) cannot run one of its collectives"),
)


def reference_failure_message(failure: RankFailure, log: str = "") -> str:
    """What the reference could not do, in words: a limit of this machine or device mode where it
    is one (CUDA, a GPU or triton missing, a gloo restriction), else a harness or problem bug."""
    text = f"{failure.message}\n{failure.text}\n{log}"
    for needle, why in REFERENCE_LIMITS:
        if needle in text:
            return f"the problem's reference cannot run here: {why} ({failure.message}); run it where its hardware needs are met"
    return f"the reference failed on rank {failure.rank}: {failure.message} (a harness or problem bug)"
