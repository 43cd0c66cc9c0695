"""The GPU-relevant part of the hostile corpus, on an NVIDIA GPU (marker ``gpu``): cuda mode at
world 1 (timed: fake events, no-op syncs, hidden work, device-memory replay, CUDA graph replay, a
spin kernel that slows the reference) and emulate mode at worlds 2 and 4 (correctness only).

    python -m pytest -m gpu tests/sandbox/harness/test_hostile_gpu.py -q
    python benchmarks/hostile_report.py --device cuda --worlds 1      # the same, as a table
"""

from __future__ import annotations

import time

import pytest

from tests.support import hostile_corpus as hc

pytestmark = pytest.mark.gpu

# CPU fixtures whose attack means something on a GPU too (timing primitives, staging, commitments)
ALSO_ON_GPU = ("timed_claims_zero", "timer_rebind_perf_counter", "work_after_timer", "precompute_at_stage", "garbage_when_timed",
               "memo_dataptr_version", "lazy_tensor_subclass", "commit_then_compute_at_reveal", "fake_done_no_compute",
               "read_oracle_and_project", "read_expected_memfds", "compile_deputy_symlink")
IN_EMULATION = ("cuda_memo_dataptr", "cuda_graph_replay", "fake_done_no_compute", "commit_then_compute_at_reveal",
                "lazy_tensor_subclass", "garbage_after_n_calls", "memo_dataptr_version", "garbage_when_timed")


def _fixtures(kind: str, names=None):
    found = hc.corpus(kind, device="any")
    return [f for f in found if f.device == "cuda" or (names is not None and f.name in names)]


# breaches this judge cannot stop on a GPU yet (strict xfail: the day one is stopped, the test says so)
# not strict: caught now and then by a defence that does not answer the hole (a claim below the roofline)
GPU_KNOWN_HOLES = {
    "work_after_timer": "on the H200 the parent's clock resolves hidden work per call only down to the harness's own per-call "
                        "cost and its differences between processes. Before 2026-12-03 that was 22 ms a call at 64 MB (the "
                        "commitment copied and hashed 128 MB on the host): 15.7x correct once, 4.47x at 125% of the roofline "
                        "once, 0.09x charged on the clock once, else rejected only because its placeholder's claim fell below "
                        "the roofline. Since the commitment of a one-rank GPU group is hashed on the device (0.65 ms for 128 "
                        "MiB), four runs on 2026-12-03: 0.42x and 1.10x charged on the clock, once rejected by the roofline, "
                        "once 14.4x at 147% of the roofline; with the 1.1x margin of a datasheet HBM roofline (since then) 9.76x at 83% "
                        "of it, correct, the claim being the placeholder's own overhead. Its hidden all-reduce showed as 0.18 ms "
                        "a call more unclaimed than the reference's, inside honest groups' -0.29 to +0.21 ms (a call's harness "
                        "work is 4.1-4.6 ms). With inputs masked until the call, on H100s: rejected by the roofline twice on "
                        "2026-12-05; on 2026-12-06 correct at 0.71x once, charged on the clock, and rejected by the roofline "
                        "once (0.14 ms a call more unclaimed than the reference's, 0.41 ms allowed); on 2026-12-07 correct at "
                        "0.91x, charged on the clock (0.071 ms a call more unclaimed than the reference's, 0.30 ms allowed)",
}
CUDA_CASES = [pytest.param(f, id=f.name, marks=[pytest.mark.xfail(strict=False, reason=GPU_KNOWN_HOLES[f.name])]
                           if f.name in GPU_KNOWN_HOLES else [])
              for kind, names in (("hostile", ALSO_ON_GPU), ("honest", ("all_reduce_reference_copy",))) for f in _fixtures(kind, names)]
# staging attacks, where inputs reach the ranks through memory files (a driver without VMM; KLOOP_INPUT_BLOBS=memfd), and
# honest copies beside them
MEMFD_NAMES = ("precompute_at_stage", "tree_salt_precomputed", "flush_skipped_hides_work", "read_expected_memfds",
               "all_reduce_reference_copy", "cuda_all_reduce_reference_copy")
MEMFD_CASES = [case for case in CUDA_CASES if case.values[0].name in MEMFD_NAMES]
SHORT_CALL_CASES = [case for case in CUDA_CASES
                    if case.values[0].name in ("timed_claims_zero", "timer_rebind_perf_counter", "all_reduce_reference_copy")]
EMULATE_CASES = [pytest.param(f, w, id=f"{f.name}-w{w}") for kind, names in (("hostile", IN_EMULATION), ("honest", ()))
                 for f in _fixtures(kind, names) if f.name in names or kind == "honest"
                 for w in (2, 4) if f.expect != "not-fast"]


def _warm(env: dict[str, str] | None = None):
    import torch

    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    from sandbox.backends import LocalSandbox
    from sandbox.evaluate import WarmEvaluator

    with LocalSandbox(env=env) as box, WarmEvaluator(box) as evaluator:
        yield box, evaluator


@pytest.fixture(scope="module")
def warm():
    yield from _warm()


@pytest.fixture(scope="module")
def warm_memfd():
    yield from _warm({"KLOOP_INPUT_BLOBS": "memfd"})


def _judge(warm, fixture, world, device, notes: list[str] | None = None, size: str | None = None):
    box, evaluator = warm
    started = time.time()
    size = size or ("default" if device == "cuda" else None)
    report = evaluator.evaluate(fixture.source(), hc.config(fixture, world, device=device, size=size))
    problems = hc.verdict_problems(fixture, report)
    problems += [f"left on the host: {p}" for p in hc.existing_leaves(hc.leaf_patterns(fixture, box.workdir), started)]
    problems += [f"outlived its group: {p}" for p in hc.orphans(box.workdir)]
    if report.reference_alone_ms is not None and report.reference_alone_ms <= 0:  # a call of 0.14 ms at the smallest size
        problems.append(f"the reference's call measured no time beyond the empty interval ({report.reference_alone_ms} ms alone)")
    if notes is not None:
        notes += report.notes
    print(f"{fixture.id} {device} w{world} {size}: {report.status} speedup={report.speedup} {report.message[:160]!r}")
    empty = report.reference_timing.sync_overhead_ms if report.reference_timing else None
    print(f"   timing check {report.timing_check}; reference alone {report.reference_alone_ms}; empty interval {empty}")
    if problems:  # what the judge saw, for whoever reads the log of a GPU run
        print(f"   isolation {report.isolation}\n   notes {report.notes}")
        for excerpt in report.logs:
            print(f"   log {excerpt.name}: {excerpt.text()[-1500:]!r}")
    return problems


@pytest.mark.parametrize("fixture", CUDA_CASES)
def test_cuda_world_1(warm, fixture):
    problems = _judge(warm, fixture, 1, "cuda")
    assert not problems, f"{fixture.id}: " + "; ".join(problems)


@pytest.mark.parametrize("size", ["small", "latency"])
@pytest.mark.parametrize("fixture", SHORT_CALL_CASES)
def test_cuda_world_1_short_calls(warm, fixture, size):
    """Claims of nothing on calls of a few microseconds, where the harness's own cost of a call is
    many times the call and its noise alone could hide the whole call from the parent's clock; an
    honest copy beside them."""
    problems = _judge(warm, fixture, 1, "cuda", size=size)
    assert not problems, f"{fixture.id} at size {size}: " + "; ".join(problems)


@pytest.mark.parametrize("fixture", MEMFD_CASES)
def test_cuda_world_1_inputs_through_memory_files(warm_memfd, fixture):
    """The staging attacks and honest copies again, with every input in a memory file: masked there
    as in device memory, and the report says which way they came."""
    from sandbox.harness.pipeline import MEMFD_INPUTS_NOTE

    notes: list[str] = []
    problems = _judge(warm_memfd, fixture, 1, "cuda", notes)
    if fixture.expect != "build_failed" and MEMFD_INPUTS_NOTE not in notes:
        problems.append("the inputs did not come through memory files")
    assert not problems, f"{fixture.id}: " + "; ".join(problems)


@pytest.mark.parametrize("fixture, world", EMULATE_CASES)
def test_emulate(warm, fixture, world):
    problems = _judge(warm, fixture, world, "emulate")
    assert not problems, f"{fixture.id} at world {world}: " + "; ".join(problems)
