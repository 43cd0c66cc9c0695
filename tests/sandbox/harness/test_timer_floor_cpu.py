"""The speedup guard for references below the timer's resolution (sandbox/harness/pipeline.py):
when the reference's median call is shorter than what the timer resolves on this device mode
(``timing.FLOOR_MS``), no speedup is reported and a note says why; above it, one is.

Real path, nothing patched: a problem folder of its own (loaded as ``folder:<path>``, as any
problem outside the suite is), timed on CPU by the real harness at world 2. The reference is the
candidate (its own source), so the run is correct and the clock check has nothing to object to;
only the reference's speed differs between the two problems.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sandbox.evaluate import evaluate_in
from sandbox.harness import timing
from sandbox.harness.config import HarnessConfig, StageTimeouts

PROBLEM = '''
from problems.authoring import randn, rank_generator
from problems.contract import Cost, ProblemSpec

SPEC = ProblemSpec(name="timer_floor_probe", category="collective", pattern="none (the identity)", origin="tests",
                   dtype="float32", atol=1e-5, rtol=1e-5, shapes={"default": {"numel": 16}, "small": {"numel": 16}})


def make_inputs(rank, world, generator, device, dtype, *, numel):
    return (randn(numel, rank_generator(generator, rank), device, dtype),)


def cost(world, dtype_bytes, *, numel):
    return Cost(comm_bytes=0, hbm_bytes=2 * numel * dtype_bytes)
'''

FAST = '''
def solution(tensor):
    return tensor  # no work at all: far below the CPU timer's floor (even a 16-element add, the first op after the
                   # harness seeds the RNG, takes ~0.1 ms on a loaded box)
'''

SLOW = '''
import time


def solution(tensor):
    time.sleep(0.005)  # 5 ms: far above the CPU timer's floor
    return tensor
'''

NOTE = "is below what the timer resolves"


def _problem(folder: Path, reference: str) -> Path:
    folder.mkdir()
    (folder / "problem.py").write_text(PROBLEM)
    (folder / "reference.py").write_text(reference)
    return folder


def _timed(box, folder: Path, reference: str):
    config = HarnessConfig(problem="timer_floor_probe", problem_ref=f"folder:{folder}", world=2, device="cpu", allow_nccl=True,
                           trials=2, timed=True, iterations=12, warmup=1, timing_budget_s=4.0, profile=False,
                           timeouts=StageTimeouts(startup_s=180, build_s=180, correctness_s=90, performance_s=180, profile_s=90))
    return evaluate_in(box, reference, config)


def test_a_reference_below_the_timer_floor_reports_no_speedup(local_sandbox, tmp_path):
    report = _timed(local_sandbox, _problem(tmp_path / "fast", FAST), FAST)
    assert report.status == "correct", report.message
    assert report.reference_timing is not None and report.reference_timing.median_ms < timing.FLOOR_MS["cpu"]
    assert report.speedup is None and report.speedup_ci is None
    notes = [n for n in report.notes if NOTE in n]
    assert len(notes) == 1 and f"({timing.FLOOR_MS['cpu']} ms)" in notes[0] and "--size" in notes[0], report.notes
    assert "x the reference" not in report.message


def test_a_reference_above_the_timer_floor_reports_a_speedup(local_sandbox, tmp_path):
    report = _timed(local_sandbox, _problem(tmp_path / "slow", SLOW), SLOW)
    assert report.status == "correct", report.message
    assert report.reference_timing.median_ms > 4.0  # the sleep, measured
    assert not [n for n in report.notes if NOTE in n], report.notes
    assert report.speedup is not None and 0.5 < report.speedup < 2.0, report.speedup  # the same code on both sides
    assert report.speedup_ci is not None and report.speedup_ci[0] <= report.speedup <= report.speedup_ci[1]
    assert "x the reference" in report.message


