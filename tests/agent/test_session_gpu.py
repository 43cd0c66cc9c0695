"""An episode's evaluations through one warm harness on a GPU (marker gpu): cuda at world 1, the
symmetric-memory all_reduce candidate at every step; the next step's candidate group is started
(its device context made, torch and its shape checks imported) while the model writes it."""

import time

import pytest

from agent.session import EvaluationSession
from sandbox.harness.config import HarnessConfig
from tests.fixtures.candidates import source

pytestmark = pytest.mark.gpu


def test_an_episode_on_a_gpu_takes_a_group_started_ahead_at_every_later_step():
    harness = HarnessConfig(problem="all_reduce", world=1, device="cuda")
    reports = []
    with EvaluationSession(harness, warm=True) as session:
        for step in range(3):
            if step:
                time.sleep(8.0)  # the model writes the next step
            started = time.monotonic()
            reports.append(session.evaluate(source("all_reduce_symm"), step))
            print(f"step {step + 1}: {reports[-1].status} in {time.monotonic() - started:.2f} s, stages {reports[-1].stage_wall_s}, "
                  f"speedup {reports[-1].speedup}, reference on the device {reports[-1].reference_device_ms} ms")
    assert [r.status for r in reports] == ["correct"] * 3, [r.message for r in reports]
    assert all(r.speedup is not None and r.reference_device_ms for r in reports)
    first = reports[0].stage_wall_s["startup"]
    assert all(r.stage_wall_s["startup"] < min(1.0, first / 2) for r in reports[1:]), [r.stage_wall_s for r in reports]
