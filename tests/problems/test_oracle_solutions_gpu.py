"""The oracle solutions on a GPU (marker ``gpu``): correct in emulation (all ranks on one GPU) at
2, 4 and 8 ranks through 500 back-to-back calls, caught by the harness when their trailing
barrier is removed, and timed and profiled in cuda mode (all-reduce, one rank).

Run on the device machine: ``python -m pytest -m gpu tests/problems/test_oracle_solutions_gpu.py -s``. Each case
prints one line starting with ``ORACLE |``: problem, world, device and size, variant, status, wall
time, message. ``KLOOP_ORACLE_STRESS_CALLS`` overrides the 500 back-to-back calls.
"""

import os

import pytest

from agent.budget import Budget, Spend
from agent.prompting import feedback_prompt
from sandbox.evaluate import evaluate_in
from sandbox.harness.config import HarnessConfig, StageTimeouts
from kloop_runtime.settings import cache_root
from sandbox.topology_measure import measure_host
from tests.problems.test_oracle_solutions import REQUIRED
from tests.problems.test_oracle_solutions import oracle_source as read_oracle

pytestmark = pytest.mark.gpu

STRESS_CALLS = int(os.environ.get("KLOOP_ORACLE_STRESS_CALLS", "500"))  # fewer for a quick look
# the stress stage is one request: 500 calls with every rank time-sliced on one GPU take a while at 8 ranks
TIMEOUTS = StageTimeouts(startup_s=120, build_s=300, correctness_s=240, performance_s=120, profile_s=120)


def oracle_source(name: str, racy: bool = False, two_shot: bool = False) -> str:
    source = read_oracle(name)
    if racy:
        source = source.replace("TRAILING_BARRIER = True", "TRAILING_BARRIER = False")
    if two_shot:
        assert "TWO_SHOT_MIN_BYTES = 512 * 1024" in source
        source = source.replace("TWO_SHOT_MIN_BYTES = 512 * 1024", "TWO_SHOT_MIN_BYTES = 0")
    return source


def evaluate(box, name: str, world: int, variant: str, source: str, **config):
    config = {"device": "emulate", "stress_calls": STRESS_CALLS, "size": "small", "timeouts": TIMEOUTS, **config}
    report = evaluate_in(box, source, HarnessConfig(problem=name, world=world, **config))
    print(f"\nORACLE | {name} | world {world} | {config['device']} {config['size']} | {variant} | {report.status} | "
          f"{report.wall_s:.1f} s | {report.message}", flush=True)
    return report


@pytest.mark.parametrize("world", [2, 4, 8])
@pytest.mark.parametrize("name", REQUIRED)  # the oracles the suite must have (tests/problems/test_oracle_solutions.py)
def test_oracle_is_correct_through_back_to_back_calls(local_sandbox, name, world):
    report = evaluate(local_sandbox, name, world, "oracle", oracle_source(name))
    assert report.status == "correct", report.model_dump_json(indent=1)


@pytest.mark.parametrize("world", [4, 8])
def test_two_shot_all_reduce_is_correct(local_sandbox, world):
    """The 'small' size runs the one-shot path; this forces the two-shot one."""
    report = evaluate(local_sandbox, "all_reduce", world, "two-shot forced", oracle_source("all_reduce", two_shot=True))
    assert report.status == "correct", report.model_dump_json(indent=1)


@pytest.mark.parametrize("two_shot", [False, True])
def test_all_reduce_with_several_blocks_is_correct(local_sandbox, two_shot):
    """The 'latency' size (64K elements) runs 4 to 16 blocks a rank: block columns really split the buffer."""
    source = oracle_source("all_reduce", two_shot=two_shot)
    report = evaluate(local_sandbox, "all_reduce", 4, "two-shot forced" if two_shot else "one-shot", source,
                      size="latency", stress_calls=100)
    assert report.status == "correct", report.model_dump_json(indent=1)


@pytest.mark.parametrize("world", [4, 8])
@pytest.mark.parametrize("name", REQUIRED)
def test_oracle_without_its_trailing_barrier_is_caught(local_sandbox, name, world):
    report = evaluate(local_sandbox, name, world, "TRAILING_BARRIER = False", oracle_source(name, racy=True))
    assert report.status != "correct", "the harness missed the race: " + report.message
    assert report.status in ("wrong", "timeout", "crashed"), report.model_dump_json(indent=1)


def test_all_reduce_oracle_in_cuda_mode_is_timed_and_profiled(local_sandbox):
    """As ``kloop eval`` does before a GPU run, this host is measured first: the roofline uses its HBM rate."""
    measurement, _ = measure_host(cache_root())
    report = evaluate(local_sandbox, "all_reduce", 1, "oracle", oracle_source("all_reduce"), device="cuda", size="default",
                      stress_calls=0)
    print(f"reference {report.reference_timing}\ncandidate {report.candidate_timing}\nspeedup {report.speedup} "
          f"roofline {report.roofline} fraction {report.roofline_fraction}", flush=True)
    print("--- feedback the model gets ---\n" + feedback_prompt(report, step=1, budget=Budget(steps=10), spend=Spend(steps=1), best=None))
    assert report.status == "correct", report.model_dump_json(indent=1)
    assert report.candidate_timing is not None and report.candidate_timing.median_ms > 0
    assert report.roofline.hbm_measured and report.roofline.hbm_gbps == pytest.approx(measurement.median_hbm_copy_gbps())
    assert report.roofline_fraction == pytest.approx(report.roofline.bound_ms / report.candidate_timing.median_ms, rel=1e-3)
    assert report.profile is not None and any("all_reduce_two_shot" in k.name for k in report.profile.kernels)
