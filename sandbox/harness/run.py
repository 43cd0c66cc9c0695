"""The harness pipeline: static checks -> build -> correctness -> performance -> recheck ->
profile. Runs in the trusted parent; stops at the first failure and says precisely why.

The reference runs first, in its own rank processes, and is done (or read from the cache)
before the candidate is imported: expected outputs only ever exist in trusted processes.
"""

from __future__ import annotations

import multiprocessing
import shutil
import statistics
import time
from pathlib import Path
from typing import Any

import structlog

from kloop_runtime.settings import MULTICAST_OFF, cache_root, compile_cache_dir
from problems import get_problem, load_ref
from problems.spec import Problem
from sandbox import performance, topology
from sandbox.harness import protocol as p
from sandbox.harness.judge import Verdict, judge, unpacked
from sandbox.harness.compile_server import CompileServer
from sandbox.harness.config import HarnessConfig, StageTimeouts
from sandbox.harness.confine import system_read_paths
from sandbox.harness.ranks import RankGroup, StageTimeout
from sandbox.harness.reference_cache import ReferenceCache, cache_key
from sandbox.harness.seeds import host_secret, mixed_seed
from sandbox.harness.static_checks import check_source
from sandbox.harness.trees import NEARLY_CONSTANT_DISTINCT
from sandbox.nvml import gpu_model_name
from sandbox.report import CompileStats, EvalReport, LogExcerpt, ProfileSummary, RankVerdict, Timing

log = structlog.get_logger(__name__)

STRESS_BATCH_BYTES = 2 * 2**30  # candidate outputs held per rank before they are checked
ROTATE_INPUT_BYTES = 2 * 60 * 2**20  # rotate input sets until together they exceed twice an H200's L2
PROFILED_CALLS = 5


def _context():
    """The forkserver that forks rank processes; started now so that its torch import overlaps
    the parent's own."""
    from multiprocessing import forkserver

    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["sandbox.harness.preload"])
    forkserver.ensure_running()
    return ctx


class Evaluation:
    def __init__(self, config: HarnessConfig, workdir: Path, problem: Problem | None = None):
        self.ctx = _context()
        self.config = config
        self.workdir = workdir.resolve()
        self.problem = problem or (load_ref(config.problem_ref) if config.problem_ref else get_problem(config.problem))
        self.dtype = config.dtype or self.problem.spec.dtype
        self.size = config.resolved_size()
        self.shape = self.problem.shape(self.size)
        self.cache_root = (config.cache_dir or cache_root()).resolve()
        self.compile_server = CompileServer(compile_cache_dir() if config.cache_dir is None else self.cache_root / "compile")
        self.groups: list[RankGroup] = []
        self.report = EvalReport(
            status="crashed", message="", problem=self.problem.name, world=config.world, device=config.device,
            dtype=self.dtype, size=self.size, trials=config.trials,
            public_seeds=[config.seed + t for t in range(config.trials)],
        )
        self.device_name = "cpu"

    # ------------------------------------------------------------------ driver
    def run(self) -> EvalReport:
        started = time.monotonic()
        try:
            self._timed_stage("static", self._static_checks)
            self._timed_stage("startup", self._prepare)
            self._timed_stage("reference", self._reference)
            self._timed_stage("build", self._build)
            self._timed_stage("correctness", self._correctness)
            if self.config.stress_calls:
                self._timed_stage("stress", self._stress)
            if self.config.is_timed():
                self._timed_stage("performance", self._performance)
            self._timed_stage("recheck", self._recheck)
            if self.config.is_profiled():
                self._timed_stage("profile", self._profile)
            self.report.stage = "done"
            self.report.status = "correct"
            self.report.message = self._success_message()
        except Verdict as verdict:
            self.report.status = verdict.status
            self.report.message = verdict.message
            for name, value in verdict.fields.items():
                if name == "notes":
                    self.report.notes.extend(value)  # keep notes of earlier stages
                else:
                    setattr(self.report, name, value)
        except StageTimeout as timeout:
            self.report.status = "timeout"
            self.report.message = f"{timeout}: a spin-wait that never got its signal, a deadlock between ranks, or just too slow"
        finally:
            teardown = time.monotonic()
            for group in self.groups:
                group.close(timeout_s=5.0)
            self.compile_server.close()
            self.report.compiles = CompileStats(requests=self.compile_server.requests, distinct=self.compile_server.distinct,
                                                failed=self.compile_server.failed)
            self._attach_logs()
            self.report.stage_wall_s["teardown"] = round(time.monotonic() - teardown, 3)
            self.report.wall_s = round(time.monotonic() - started, 3)
        return self.report

    def _timed_stage(self, name: str, stage) -> None:
        if name in ("static", "build", "correctness", "stress", "performance", "recheck", "profile"):
            self.report.stage = name
        started = time.monotonic()
        try:
            stage()
        finally:
            self.report.stage_wall_s[name] = round(time.monotonic() - started, 3)

    # ------------------------------------------------------------------ stages
    def _static_checks(self) -> None:
        path = self.workdir / self.config.solution
        try:
            source = path.read_text()
        except (OSError, UnicodeDecodeError) as error:
            raise Verdict("build_failed", f"cannot read the solution {self.config.solution}: {error}") from None
        verdict = check_source(source, self.config.solution.name, allow_nccl=self.config.allow_nccl)
        if verdict.status != "ok":
            raise Verdict(verdict.status, verdict.message)
        self.source = source

    def _prepare(self) -> None:
        self.candidate_dir = self.workdir / "candidate"
        self.log_dir = self.workdir / "logs"
        for folder in (self.candidate_dir, self.log_dir, self.candidate_dir / "tmp"):
            folder.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(self.workdir / self.config.solution, self.candidate_dir / "solution.py")
        secret = host_secret(self.cache_root)
        publics = self.report.public_seeds + [self.config.seed + self.config.trials]
        self.seeds = [mixed_seed(s, secret) for s in publics]
        self.timing_seed = mixed_seed(self.config.seed + 10_000, secret)
        if self.config.device != "cpu":
            self.device_name = gpu_model_name() or "unknown-gpu"
        self.candidate = self._start_group("candidate")

    def _start_group(self, role: p.Role) -> RankGroup:
        env = dict(MULTICAST_OFF)
        if self.config.device == "emulate":
            env["TORCH_SYMM_MEM_ALLOW_OVERLAPPING_DEVICES"] = "1"
        if role == "candidate":
            env.update(HOME=str(self.candidate_dir), TMPDIR=str(self.candidate_dir / "tmp"),
                       TRITON_CACHE_DIR=str(self.candidate_dir / "triton"), TORCHINDUCTOR_CACHE_DIR=str(self.candidate_dir / "inductor"))
        module = self.candidate_dir / "solution.py" if role == "candidate" else self.problem.reference_path

        def make_args(rank: int, port: int) -> p.WorkerArgs:
            return p.WorkerArgs(
                role=role, rank=rank, world=self.config.world, device_mode=self.config.device, store_port=port,
                problem_ref=self.problem.ref, dtype=self.dtype, shape=self.shape, module_path=module,
                workdir=self.candidate_dir, log_path=self.log_dir / f"{role}_rank{rank}.log",
                readable_paths=tuple(system_read_paths()), compile_cache=self.compile_server.cache_dir,
                env=env,
            )

        group = RankGroup(self.ctx, role, self.config.world, make_args, self.compile_server)
        self.groups.append(group)
        return group

    def _await_ready(self, group: RankGroup) -> None:
        replies = group.collect(self.config.timeouts.startup_s, "start-up")
        failed = [r for r in replies if isinstance(r, p.Failed)]
        if failed:
            raise Verdict("crashed", f"{group.role} rank {failed[0].rank} could not start: {failed[0].message}",
                          logs=[LogExcerpt.of(f"{group.role} rank {failed[0].rank}", failed[0].text)])

    def _reference(self) -> None:
        config = self.config
        cache = ReferenceCache(self.cache_root) if config.reference_cache else None
        import torch

        identity = dict(problem=self.problem.name, version=self.problem.source_hash(), world=config.world, dtype=self.dtype,
                        shape=self.shape, device=config.device, gpu=self.device_name, torch=torch.__version__)
        outputs_key = cache_key(**identity, seeds=self.seeds)
        timing_key = cache_key(**identity, timing=[self.timing_seed, config.warmup, config.iterations, config.timing_budget_s])
        self.expected = cache.load(outputs_key, "outputs") if cache else None
        timing = cache.load(timing_key, "timing") if cache and config.is_timed() else None
        self.report.reference_profile = cache.load(timing_key, "profile") if cache and self._profiles_reference() else None
        need_timing = config.is_timed() and timing is None
        need_profile = self._profiles_reference() and self.report.reference_profile is None
        cached = self.expected is not None and not need_timing and not need_profile
        self.report.reference_cache = "off" if cache is None else ("hit" if cached else "miss")
        if cached:
            self.report.reference_timing = timing
            self._note_weak_inputs()
            return
        reference = self._loaded_reference()
        if self.expected is None:
            self.expected = self._reference_outputs(reference, p.RunTrials(tuple(self.seeds)))  # [rank][seed]
            if cache:
                nbytes = sum(t.numel() * t.element_size() for rank in self.expected for out in rank for t in out.expected)
                cache.store(outputs_key, "outputs", self.expected, nbytes)
        self._note_weak_inputs()
        if need_timing:
            timing = self._time(reference, "reference")
            if cache:
                cache.store(timing_key, "timing", timing)
        self.report.reference_timing = timing
        if need_profile:
            try:
                self.report.reference_profile = self._profile_group(reference, "reference", timing)
            except StageTimeout as timeout:
                self.report.notes.append(f"profiling the reference failed: {timeout}")
            if cache and self.report.reference_profile is not None:
                cache.store(timing_key, "profile", self.report.reference_profile)
        reference.close()

    def _loaded_reference(self) -> RankGroup:
        group = self._start_group("reference")
        self._await_ready(group)
        self._expect_done(group.request(p.Load(), self.config.timeouts.build_s, "reference load"), "reference")
        return group

    def _reference_outputs(self, group: RankGroup, command: p.RunTrials) -> list[list[p.ReferenceOutput]]:
        replies = self._expect_done(group.request(command, self.config.timeouts.correctness_s, "reference run"), "reference")
        return [[unpacked(out) for out in reply.payload] for reply in replies]

    def _profiles_reference(self) -> bool:
        """The reference is profiled (cheaply: a few calls, cached with its timing) whenever it is
        timed and the candidate will be profiled, so the model sees what NCCL does."""
        return self.config.is_timed() and self.config.is_profiled()

    def _note_weak_inputs(self) -> None:
        if self.expected and all(getattr(out, "nearly_constant_inputs", False) for rank in self.expected for out in rank):
            self.report.notes.append(
                "weak check: on every rank and trial the inputs are nearly constant (each floating input holds at most "
                f"{NEARLY_CONSTANT_DISTINCT} distinct values, e.g. torch.full(rank + 1) as in ParallelKernelBench's collective "
                "primitives), so a solution that does not compute from its inputs could still be judged correct")

    def _expect_done(self, replies: list, role: str) -> list[p.Done]:
        for reply in replies:
            if isinstance(reply, p.Failed):
                raise Verdict("crashed", f"the {role} failed on rank {reply.rank}: {reply.message} (a harness or problem bug)",
                              logs=[LogExcerpt.of(f"{role} rank {reply.rank}", reply.text)])
        return replies

    def _candidate_failure(self, replies: list) -> None:
        failures = [r for r in replies if isinstance(r, p.Failed)]
        if not failures:
            return
        primary = next((f for f in failures if "after another rank failed" not in f.message), failures[0])
        verdicts = [RankVerdict(rank=r.rank, ok=not isinstance(r, p.Failed), message=getattr(r, "message", "")) for r in replies]
        excerpt = [LogExcerpt.of(f"rank {primary.rank} traceback", primary.text)] if primary.text else []
        if primary.kind == "violation":
            raise Verdict("rejected", f"rank {primary.rank}: {primary.message}", ranks=verdicts)
        if primary.kind == "build":
            raise Verdict("build_failed", f"rank {primary.rank}: {primary.message}", ranks=verdicts,
                          build_log=LogExcerpt.of("build", primary.text, keep_chars=6000))
        raise Verdict("crashed", f"rank {primary.rank} crashed: {primary.message}", ranks=verdicts, logs=excerpt)

    def _build(self) -> None:
        self._await_ready_candidate()
        replies = self.candidate.request(p.Load(), self.config.timeouts.build_s, "build")
        self._candidate_failure(replies)
        self.report.isolation = list(replies[0].payload.get("isolation", ()))

    def _await_ready_candidate(self) -> None:
        replies = self.candidate.collect(self.config.timeouts.startup_s, "start-up")
        self._candidate_failure(replies)

    def _correctness(self) -> None:
        trials = self.config.trials
        replies = self.candidate.request(p.RunTrials(tuple(self.seeds[:trials]), isolated_calls=1),
                                         self.config.timeouts.correctness_s, "correctness")
        self._candidate_failure(replies)
        self._judge([[unpacked(out) for out in r.payload] for r in replies], list(range(trials)), back_to_back_from=1)

    def _compare_device(self):
        """Where outputs are compared: the first GPU when there is one (a 32M-element compare
        takes milliseconds there, most of a second on the CPU), else the CPU."""
        import torch

        if not hasattr(self, "_device_for_compare"):
            self._device_for_compare = torch.device("cuda", 0) if self.config.device != "cpu" and torch.cuda.is_available() else torch.device("cpu")
        return self._device_for_compare

    def _judge(self, per_rank: list[list[p.CandidateOutput]], trial_indices: list[int], **hints: Any) -> None:
        self.report.ranks = judge(self.expected, per_rank, trial_indices, self.problem.spec, self._compare_device(), **hints)

    def _stress(self) -> None:
        """``stress_calls`` back-to-back calls cycling through the trial inputs, every output
        checked. Outputs are held on the GPU until checked, so at large sizes the calls go in
        batches of back-to-back calls (a host sync between batches)."""
        trials = self.config.trials
        output_bytes = max(sum(t.numel() * t.element_size() for t in out.expected) for rank in self.expected for out in rank[:trials])
        batch = max(4, min(self.config.stress_calls, STRESS_BATCH_BYTES // max(output_bytes, 1)))
        done = 0
        while done < self.config.stress_calls:
            count = min(batch, self.config.stress_calls - done)
            indices = [(done + i) % trials for i in range(count)]
            replies = self.candidate.request(p.RunTrials(tuple(self.seeds[i] for i in indices), isolated_calls=0),
                                             self.config.timeouts.correctness_s, "stress")
            self._candidate_failure(replies)
            try:
                self._judge([[unpacked(out) for out in r.payload] for r in replies], indices)
            except Verdict as verdict:
                verdict.fields.setdefault("notes", []).append(
                    f"wrong within back-to-back calls {done + 1}-{done + count} of the stress run "
                    f"({self.config.stress_calls} calls in batches of {batch}); the correctness trials before it passed")
                raise
            done += count
        self.report.notes.append(f"stress: {done} back-to-back calls (batches of {batch}), all outputs correct")

    def _performance(self) -> None:
        self.report.candidate_timing = self._time(self.candidate, "candidate")
        ref, cand = self.report.reference_timing, self.report.candidate_timing
        if ref and cand and cand.median_ms > 0:
            self.report.speedup = round(ref.median_ms / cand.median_ms, 4)
        if self.config.device == "cuda" and cand is not None:
            topo = topology.host_topology(self.config.world, self.device_name, self.cache_root)
            cost = self.problem.cost_at(self.config.world, self.size, self.dtype)
            bound = topology.roofline_for(topo, cost)
            if bound is None:
                return  # the problem has no cost model (e.g. ParallelKernelBench's): no roofline
            self.report.roofline = bound
            self.report.roofline_fraction = round(bound.bound_ms / cand.median_ms, 4) if cand.median_ms else None
            if cost.comm_bytes and cand.median_ms:
                self.report.achieved_comm_gbps = round(cost.comm_bytes / (cand.median_ms * 1e-3) / 1e9, 2)
            self._analyse()

    def _analyse(self) -> None:
        """The candidate's and the reference's calls against the roofline (with their profiles
        once there are some)."""
        report = self.report
        if report.roofline is None:
            return
        if report.candidate_timing is not None:
            report.analysis = performance.analyse(report.candidate_timing, report.roofline, report.profile)
        if report.reference_timing is not None:
            report.reference_analysis = performance.analyse(report.reference_timing, report.roofline, report.reference_profile)

    def _time(self, group: RankGroup, role: str) -> Timing:
        config = self.config
        command = p.TimeCalls(warmup=config.warmup, iterations=config.iterations, rotate_bytes=ROTATE_INPUT_BYTES,
                              seed=self.timing_seed, budget_s=config.timing_budget_s)
        replies = group.request(command, config.timeouts.performance_s, f"{role} timing")
        if role == "candidate":
            self._candidate_failure(replies)
        else:
            self._expect_done(replies, role)
        per_rank = [r.payload["times_ms"] for r in replies]
        medians = [statistics.median(times) for times in per_rank]
        slowest = max(range(len(medians)), key=medians.__getitem__)
        quartiles = statistics.quantiles(per_rank[slowest], n=4) if len(per_rank[slowest]) > 1 else [0, 0, 0]
        return Timing(median_ms=round(medians[slowest], 6), iqr_ms=round(quartiles[2] - quartiles[0], 6),
                      min_ms=round(min(min(t) for t in per_rank), 6), per_rank_median_ms=[round(m, 6) for m in medians],
                      iterations=len(per_rank[slowest]), warmup=config.warmup, input_sets=replies[0].payload["input_sets"],
                      sync_overhead_ms=round(replies[slowest].payload["overhead_ms"], 6))

    def _recheck(self) -> None:
        trial = self.config.trials
        replies = self.candidate.request(p.RunTrials((self.seeds[trial],), isolated_calls=0),
                                         self.config.timeouts.correctness_s, "recheck")
        self._candidate_failure(replies)
        self._judge([[unpacked(out) for out in r.payload] for r in replies], [trial], after_timing=self.config.is_timed())

    def _profile(self) -> None:
        self.report.profile = self._profile_group(self.candidate, "candidate", self.report.candidate_timing)
        self._analyse()

    def _profile_group(self, group: RankGroup, role: str, timing: Timing | None) -> ProfileSummary | None:
        """Profile a few calls on every rank; keep the slowest rank's profile (rank 0 untimed)."""
        command = p.Profile(iterations=PROFILED_CALLS, seed=self.timing_seed)
        replies = group.request(command, self.config.timeouts.profile_s, f"{role} profile")
        done = [r for r in replies if isinstance(r, p.Done)]
        if len(done) != len(replies):
            self.report.notes.append(f"profiling the {role} failed: " + next(r.message for r in replies if isinstance(r, p.Failed)))
            return None
        medians = timing.per_rank_median_ms if timing is not None else []
        rank = max(range(len(medians)), key=medians.__getitem__) if len(medians) == len(done) else 0
        return ProfileSummary(**done[rank].payload)

    # ------------------------------------------------------------------ report
    def _success_message(self) -> str:
        parts = [f"correct on all {self.config.world} ranks over {self.config.trials + 1} trials"]
        if self.report.speedup is not None:
            parts.append(f"{self.report.speedup:.2f}x the reference")
        if self.report.roofline_fraction is not None:
            parts.append(f"{100 * self.report.roofline_fraction:.0f}% of the roofline")
        return ", ".join(parts)

    def _attach_logs(self) -> None:
        log_dir = getattr(self, "log_dir", None)
        if log_dir is None:
            return
        failing = {v.rank for v in self.report.ranks if not v.ok}
        for rank in range(self.config.world):
            path = log_dir / f"candidate_rank{rank}.log"
            if not path.exists():
                continue
            text = path.read_text(errors="replace")
            if text.strip() and (rank in failing or rank == 0 or self.report.status in ("crashed", "timeout")):
                self.report.logs.append(LogExcerpt.of(f"candidate rank {rank} output", text, keep_chars=2000))


def run_reference(problem: Problem, world: int, device: str = "cpu", seeds: tuple[int, ...] = (0,), size: str | None = None,
                  dtype: str | None = None, include_native: bool = True, timeout_s: float = 300.0,
                  perturb: tuple[int | None, ...] = ()) -> list[list[p.ReferenceOutput]]:
    """Run a problem's reference on ``world`` ranks for each seed (no candidate, no cache);
    returns ``[rank][seed]`` outputs. ``perturb[i]``, where given and not None, is the index of a
    floating input that trial i replaces by a noisy copy (the same on every rank). Used by the
    problem lint and tests."""
    import tempfile

    config = HarnessConfig(problem=problem.name, world=world, device=device, size=size, dtype=dtype, timed=False,
                           timeouts=StageTimeouts(build_s=timeout_s, correctness_s=timeout_s))
    with tempfile.TemporaryDirectory(prefix="kloop-reference-") as tmp:
        evaluation = Evaluation(config, Path(tmp), problem=problem)
        evaluation.candidate_dir = evaluation.log_dir = Path(tmp)
        try:
            group = evaluation._loaded_reference()
            return evaluation._reference_outputs(group, p.RunTrials(tuple(seeds), include_native=include_native, perturb=tuple(perturb)))
        finally:
            for group in evaluation.groups:
                group.close()
            evaluation.compile_server.close()
