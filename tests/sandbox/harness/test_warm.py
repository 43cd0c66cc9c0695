"""The warm path's rank groups (sandbox/harness/warm.py, sandbox/evaluate.py WarmEvaluator): a
candidate group is started ahead and ready when an evaluation begins, no group that ran a
candidate is handed to another, and nothing a warm harness started outlives it, closed or killed.

Real processes throughout: a long-lived harness (``python -m sandbox.harness.serve``) in a local
sandbox, or WarmGroups driven in this process, with jailed candidate ranks on the CPU (gloo).
"""

from __future__ import annotations

import importlib.util
import os
import signal
import sys
import time

import psutil
import pytest

from tests.fixtures.candidates import HERE as CANDIDATES
from tests.fixtures.candidates import printed, source
from tests.support.processes import still_running

MARKS = "all_reduce_marks_its_process"
READY_WAIT_S = 180.0


def _config(**overrides):
    from sandbox.harness.config import HarnessConfig, StageTimeouts

    base = {"problem": "all_reduce", "world": 1, "device": "cpu", "allow_nccl": True, "trials": 2, "timed": False, "size": "small",
            "profile": False, "timeouts": StageTimeouts(startup_s=180, build_s=180, correctness_s=90, performance_s=180)}
    return HarnessConfig(**{**base, **overrides})


def _token(report) -> str:
    return printed(report, "kloop-token")


def _descendants(pid: int) -> list[psutil.Process]:
    return psutil.Process(pid).children(recursive=True)


@pytest.fixture
def box(tmp_path):
    from sandbox.backends import LocalSandbox

    with LocalSandbox(env={"KLOOP_CACHE_DIR": str(tmp_path / "cache")}) as sandbox:
        yield sandbox


# ---------------------------------------------------------------------------- the trust boundary
def test_no_candidate_gets_a_group_that_ran_another(box):
    """The marking fixture crashes wherever an earlier candidate's process or folder is reused:
    through one warm harness, evaluation after evaluation, every one is correct, each in a
    process of its own (its own token)."""
    from sandbox.evaluate import WarmEvaluator

    config = _config()
    with WarmEvaluator(box) as warm:
        reports = [warm.evaluate(source(MARKS), config) for _ in range(4)]
    assert [r.status for r in reports] == ["correct"] * 4, [r.message for r in reports]
    tokens = [_token(r) for r in reports]
    assert all(tokens) and len(set(tokens)) == 4, tokens


def test_the_marking_fixture_sees_a_reused_process(tmp_path, monkeypatch):
    """Control: imported twice in one process (as a reused rank would), the fixture refuses the
    second time, naming its marks; so the test above would fail were a group reused."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    path = CANDIDATES / f"{MARKS}.py"
    try:
        for attempt in range(2):
            spec = importlib.util.spec_from_file_location(f"kloop_marks_{attempt}", path)
            module = importlib.util.module_from_spec(spec)
            if attempt == 0:
                spec.loader.exec_module(module)
            else:
                with pytest.raises(RuntimeError, match="ran a candidate before.*sys.path"):
                    spec.loader.exec_module(module)
    finally:
        sys.path[:] = [entry for entry in sys.path if not entry.startswith("/kloop-reuse-mark/")]


# ---------------------------------------------------------------------------- start-up hints
@pytest.mark.parametrize("world", [2, 4, 8])
def test_a_fresh_group_imports_shape_checks_for_a_source_that_names_symmetric_memory(box, world):
    """torch's first shape check imports sympy (2-4 s of a symmetric-memory candidate's first call
    on the H200): a fresh group whose candidate names symmetric memory imports it before its ranks
    are ready, seen from inside every rank; one that does not name it (the control) does not."""
    from sandbox.evaluate import evaluate_in
    from sandbox.rank.zygote import SHAPE_CHECKS

    assert SHAPE_CHECKS == "torch.fx.experimental.symbolic_shapes"  # the name the fixture looks for
    plain = source("all_reduce_reports_shape_checks")
    seen = {}
    for name, text in (("plain", plain), ("names it", "# a SymmetricBuffer would do\n" + plain)):
        report = evaluate_in(box, text, _config(world=world))
        assert report.status == "correct", report.message
        seen[name] = printed(report, "kloop-shape-checks")  # whether every rank had them
    assert seen == {"plain": "False", "names it": "True"}, seen


# ---------------------------------------------------------------------------- nothing kept between evaluations
def _memory_files(pid: int) -> list[str]:
    """The memory files (memfd) process ``pid`` holds open, by name."""
    names = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("/memfd:"):
            names.append(target.split()[0])
    return sorted(names)


def test_a_warm_harness_holds_no_call_data_between_evaluations(box):
    """The reference's expected outputs (a memory file per checked call and rank) are copied out
    and closed: a harness that kept them held 2.3 GB more after every default-size evaluation
    until the host ran out of memory (CI, the hostile corpus). After three evaluations the harness
    holds no more memory files than after one, and none of the reference's."""
    from sandbox.evaluate import WarmEvaluator

    config = _config(world=2, trials=3)
    with WarmEvaluator(box) as warm:
        held = []
        for _ in range(3):
            report = warm.evaluate(source("all_reduce_fp32"), config)
            assert report.status == "correct", report.message
            held.append(_memory_files(warm.process.pid))
    assert held[2] == held[0], held
    assert not [name for name in held[2] if "kloop-expected" in name], held[2]


# ---------------------------------------------------------------------------- groups kept ready
def test_warm_groups_keep_fresh_groups_ready_and_end_used_ones(tmp_path, monkeypatch):
    """A group taken is replaced at once (the pool stays full), the next evaluation gets a group
    already ready and never the one before, and a group handed back is gone once ``wait_ended``
    returns; close ends every group started ahead."""
    from sandbox.harness.pipeline import Evaluation
    from sandbox.harness.warm import WarmGroups

    monkeypatch.setenv("KLOOP_CACHE_DIR", str(tmp_path / "cache"))
    groups = WarmGroups(tmp_path / "groups", depth=2)
    evaluations = []
    try:
        taken = []
        for index in range(3):
            folder = tmp_path / f"eval-{index}"
            folder.mkdir()
            evaluation = Evaluation(_config(), folder, groups=groups)
            evaluations.append(evaluation)
            if index > 0:
                assert groups.ready_count(evaluation, READY_WAIT_S) == 2
            reference, candidate = groups.acquire(evaluation)
            assert groups.ready_count(evaluation) <= 2
            if index > 0:
                assert candidate.overheads is not None, "the group was not started ahead and ready"
            assert all(candidate is not other for other, _ in taken)
            processes = _descendants(candidate.process.pid) + [psutil.Process(candidate.process.pid)]
            evaluation.report.status = "correct"  # handed back in the background, as after a correct verdict
            groups.release(evaluation, reference, candidate)
            assert groups.wait_ended(30.0)
            assert candidate.closed and not candidate.workdir.exists()
            assert still_running(processes, wait_s=2.0) == []
            taken.append((candidate, processes))
        pooled = [p for entry in groups._candidates.values() for e in entry if e.group for p in
                  [psutil.Process(e.group.process.pid), *_descendants(e.group.process.pid)]]
        assert pooled, "nothing was started ahead"
    finally:
        groups.close()
    assert still_running(pooled) == []


def test_no_group_starts_while_an_evaluation_times(tmp_path, monkeypatch):
    """A replacement asked for during a timed phase (``quiet``) waits for its end; one that is
    starting when a timed phase begins is stopped for it, every process of its tree, and goes on
    after. Either way no start-up (torch imported in every rank) shares the machine with a timing."""
    from sandbox.harness.pipeline import Evaluation
    from sandbox.harness.warm import WarmGroups

    monkeypatch.setenv("KLOOP_CACHE_DIR", str(tmp_path / "cache"))
    groups = WarmGroups(tmp_path / "groups", depth=1)
    try:
        evaluations = [Evaluation(_config(), (tmp_path / f"eval-{i}").resolve(), groups=groups) for i in range(2)]
        for evaluation in evaluations:
            evaluation.workdir.mkdir()
        first = evaluations[0]
        reference, candidate = groups.acquire(first)
        with groups.quiet():
            groups.release(first, reference, candidate)
            time.sleep(3.0)  # a start-up that ignored the timing would have begun by now
            waiting = [entry for pool in groups._candidates.values() for entry in pool]
            assert len(waiting) == 1 and waiting[0].group is None and not waiting[0].done.is_set()
        assert groups.ready_count(first, READY_WAIT_S) == 1
        reference, candidate = groups.acquire(evaluations[1])
        groups.release(evaluations[1], reference, candidate)  # its replacement starts at once: no timing now
        starting = [entry for pool in groups._candidates.values() for entry in pool]
        deadline = time.monotonic() + 30.0
        while starting[0].group is None and time.monotonic() < deadline:  # its processes launched
            time.sleep(0.05)
        assert len(starting) == 1 and starting[0].group is not None and not starting[0].done.is_set()
        tree = [p for p in _descendants(starting[0].group.process.pid) if "sandbox.rank" in " ".join(p.cmdline())]
        assert tree, "the group's ranks are not running"
        with groups.quiet():
            assert {p.status() for p in tree} == {psutil.STATUS_STOPPED}  # stopped, not waited for
            time.sleep(1.0)
            assert not starting[0].done.is_set()  # a stopped start-up does not go on
        assert {p.status() for p in tree} != {psutil.STATUS_STOPPED}
        assert groups.ready_count(first, READY_WAIT_S) == 1 and starting[0].ready  # it went on after
    finally:
        groups.close()


# ---------------------------------------------------------------------------- nothing outlives the harness
@pytest.mark.parametrize("how", ["closed", "killed"])
def test_no_process_of_a_warm_harness_outlives_it(box, how):
    """Every process below the warm harness (the reference's ranks, candidate groups started
    ahead, those still ending) is gone once the evaluator is closed, or once the harness is
    killed outright."""
    from sandbox.evaluate import WarmEvaluator

    warm = WarmEvaluator(box)
    try:
        report = warm.evaluate(source("all_reduce_fp32"), _config())
        assert report.status == "correct", report.message
        time.sleep(1.0)  # the groups started ahead are on their way
        below = _descendants(warm.process.pid)
        assert any("sandbox.rank" in " ".join(p.cmdline()) for p in below), [p.cmdline() for p in below]
        assert any("reference_rank" in " ".join(p.cmdline()) for p in below)
        if how == "killed":
            os.kill(warm.process.pid, signal.SIGKILL)
            warm.process.wait()
    finally:
        warm.close()
    assert still_running(below, wait_s=15.0) == []


def test_a_warm_harness_keeps_only_its_most_recently_used_reference_groups(tmp_path, monkeypatch):
    """Reference groups are kept per problem and shape up to ``max_reference_ranks`` ranks in all,
    the most recently used: a batch over many problems does not keep a group (torch, a device
    context, expected outputs) for each. The least recently used one beyond the limit ends."""
    from sandbox.harness.pipeline import Evaluation
    from sandbox.harness.warm import WarmGroups

    monkeypatch.setenv("KLOOP_CACHE_DIR", str(tmp_path / "cache"))
    groups = WarmGroups(tmp_path / "groups", depth=0, max_reference_ranks=2)
    handed_back = []
    try:
        for problem in ("all_reduce", "all_gather", "reduce_scatter", "all_gather"):
            folder = tmp_path / f"eval-{len(handed_back)}"
            folder.mkdir()
            evaluation = Evaluation(_config(problem=problem), folder, groups=groups)
            reference, candidate = groups.acquire(evaluation)
            if len(handed_back) == 3:
                assert reference is handed_back[1][0], "a kept reference group was not reused"
            reference.loaded = True  # as once the pipeline has loaded its module
            evaluation.report.status = "correct"
            groups.release(evaluation, reference, candidate)
            handed_back.append((reference, psutil.Process(reference.process.pid)))
        assert groups.wait_ended(30.0)
        first, second, third = (group for group, _ in handed_back[:3])
        assert list(groups._references.values()) == [third, second], "not the two most recently used"
        assert first.closed and still_running([handed_back[0][1]], wait_s=5.0) == []
        assert not second.closed and not third.closed
    finally:
        groups.close()
    assert still_running([process for _, process in handed_back]) == []



def test_a_warm_harness_collects_the_ranks_of_the_reference_groups_it_ends(box):
    """A reference group's zygote forks its ranks; when the group is ended they are re-parented to the
    harness (a child subreaper) and must be collected there, not left as zombies: a warm harness
    gathered one per rank of every group it ended (hundreds over a CI run). A world-8 group beside a
    world-2 one is more than the 8 reference ranks kept, so the world-2 group is ended."""
    from sandbox.evaluate import WarmEvaluator

    with WarmEvaluator(box) as warm:
        for world in (2, 8):
            report = warm.evaluate(source("all_reduce_fp32"), _config(world=world))
            assert report.status == "correct", report.message
        harness = psutil.Process(warm.process.pid)

        def references() -> list[psutil.Process]:
            found = []
            for child in harness.children():
                try:  # a child may end between the listing and the question (a group being ended)
                    if child.status() != psutil.STATUS_ZOMBIE and "reference_rank" in " ".join(child.cmdline()):
                        found.append(child)
                except psutil.NoSuchProcess:
                    continue
            return found

        deadline = time.monotonic() + 30
        while len(references()) > 1 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert len(references()) == 1, "the least recently used reference group was not ended"
        time.sleep(2.0)  # its ranks, killed with it, have ended and been re-parented by now
        zombies = []
        for child in harness.children():
            try:
                if child.status() == psutil.STATUS_ZOMBIE:
                    zombies.append(child)
            except psutil.NoSuchProcess:  # collected meanwhile: not a zombie
                continue
        assert zombies == [], f"{len(zombies)} ranks of ended groups left as zombies of the harness"


def test_the_pool_is_deeper_on_a_gpu_and_one_depth_overrides_every_device(monkeypatch):
    """Start-ups go on only between timings, and on a GPU host take four or five small
    evaluations: depth 8 there (sandbox/harness/warm.py), 4 where the start-ups share the cores."""
    from sandbox.harness import warm

    assert (warm.pool_depth("cuda"), warm.pool_depth("cpu"), warm.pool_depth("emulate")) == (8, 4, 4)
    monkeypatch.setattr(warm, "DEPTH_OVERRIDE", "2")
    assert {warm.pool_depth(device) for device in ("cuda", "cpu", "emulate")} == {2}


def test_a_kept_reference_group_times_the_reference_alone_once_for_several_evaluations(tmp_path):
    """With the time alone kept for 3 evaluations (KLOOP_KEEP_ALONE, on a GPU by default 8): the
    first evaluation measures it, the next two take it (its age in their reports, the same median),
    the fourth measures it afresh. Every one is timed and correct."""
    from sandbox.backends import LocalSandbox
    from sandbox.evaluate import WarmEvaluator

    config = _config(timed=True, iterations=10, warmup=1)
    env = {"KLOOP_CACHE_DIR": str(tmp_path / "cache"), "KLOOP_KEEP_ALONE": "3"}
    with LocalSandbox(env=env) as box, WarmEvaluator(box) as warm:
        reports = [warm.evaluate(source("all_reduce_fp32"), config) for _ in range(4)]
    assert [r.status for r in reports] == ["correct"] * 4, [r.message for r in reports]
    ages = [r.reference_alone_age_s for r in reports]
    assert ages[0] is None and ages[3] is None, ages
    assert 0 < ages[1] < ages[2], ages
    # the same rounds, less each evaluation's own empty interval (one rank: the median moves by its difference at most, and
    # both are rounded to 6 places)
    first = reports[0]
    for kept in reports[1:3]:
        moved = abs(kept.reference_timing.sync_overhead_ms - first.reference_timing.sync_overhead_ms)
        assert abs(kept.reference_alone_ms - first.reference_alone_ms) <= moved + 1e-5, (kept.reference_alone_ms, first.reference_alone_ms)
    assert all(r.reference_alone_ms for r in reports)


def test_the_time_alone_serves_its_count_its_age_and_until_a_slowed_reference_drops_it(monkeypatch):
    from types import SimpleNamespace

    from sandbox.harness import warm

    group, plan = SimpleNamespace(kept_alone={}), (16, 64, 1)
    assert warm.kept_alone(group, plan, "cuda") is None  # nothing measured yet
    warm.keep_alone(group, plan, ["round"])
    assert [warm.kept_alone(group, plan, "cuda") is not None for _ in range(8)] == [True] * 7 + [False]  # 8 in all
    assert warm.kept_alone(group, plan, "cpu") is None  # on the host CPU: measured every time
    warm.keep_alone(group, plan, ["round"])
    assert warm.kept_alone(group, (16, 32, 1), "cuda") is None  # another timing plan
    assert warm.kept_alone(group, plan, "cuda").rounds == ["round"]
    warm.drop_alone(group)
    assert warm.kept_alone(group, plan, "cuda") is None
    warm.keep_alone(group, plan, ["round"])
    monkeypatch.setattr(warm.time, "monotonic", lambda: group.kept_alone[plan].measured_at + warm.KEEP_ALONE_S + 1)
    assert warm.kept_alone(group, plan, "cuda") is None  # too old


def test_a_count_from_the_environment_that_is_not_one_is_ignored(monkeypatch):
    """KLOOP_WARM_DEPTH and KLOOP_KEEP_ALONE: a typo leaves the harness on its defaults, never
    crashes it."""
    from sandbox.harness import warm

    for value, expected in (("3", 3), (" 12 ", 12), ("", None), ("0", None), ("-2", None), ("eight", None), ("2.5", None)):
        monkeypatch.setenv("KLOOP_TEST_COUNT", value)
        assert warm.env_count("KLOOP_TEST_COUNT") == expected, value
    monkeypatch.delenv("KLOOP_TEST_COUNT")
    assert warm.env_count("KLOOP_TEST_COUNT") is None
