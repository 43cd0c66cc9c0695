"""An episode's evaluations through one long-lived harness (agent/session.py, warm): the harness
and the reference's group are kept from step to step, the next candidate group is started ahead,
a harness that stops answering is a ``timeout`` and the next step gets a new one. Real processes,
gloo's CPU path at world 2."""

import time

import pytest

import sandbox.evaluate
from agent.session import EvaluationSession
from sandbox.harness.config import HarnessConfig, StageTimeouts
from tests.fixtures.candidates import source
from tests.support.leftovers import leftover_steps
from tests.support.processes import leftover_processes

MODEL_THINKS_S = 10.0  # between two steps: time enough for a candidate group to start ahead (about 2 s on two cores)


def harness(**overrides):
    return HarnessConfig(**{"problem": "all_reduce", "world": 2, "device": "cpu", "allow_nccl": True, "trials": 2, "timed": False,
                            **overrides})


def test_an_episode_judges_its_steps_through_one_harness_with_groups_started_ahead():
    with EvaluationSession(harness(), warm=True) as session:
        reports, pids = [], []
        for step, name in enumerate(["all_reduce_fp32", "all_reduce_wrong_rank", "all_reduce_fp32"]):
            if step == 1:
                time.sleep(MODEL_THINKS_S)  # the model writes the next step meanwhile
            reports.append(session.evaluate(source(name), step))
            pids.append(session.evaluator.warm.process.pid)
        marker = session.box.marker
    assert [r.status for r in reports] == ["correct", "wrong", "correct"], [r.message for r in reports]
    assert len(set(pids)) == 1  # one harness process for the whole episode
    # the first step starts its ranks (python, torch, the process group); the second finds them started while the model wrote it
    fresh, ahead = reports[0].stage_wall_s["startup"], reports[1].stage_wall_s["startup"]
    assert ahead < min(1.0, fresh / 2), (fresh, ahead)
    assert leftover_processes(marker) == []  # the harness and every group it kept ended with the session


def test_a_single_evaluation_runs_a_harness_of_its_own():
    with EvaluationSession(harness()) as session:
        assert session.evaluator.warm is None
        assert session.evaluate(source("all_reduce_fp32")).status == "correct"


def test_a_warm_harness_that_stops_answering_is_a_timeout_and_the_next_step_gets_a_new_one(monkeypatch):
    with EvaluationSession(harness(timeouts=StageTimeouts(correctness_s=30)), warm=True) as session:
        monkeypatch.setattr(sandbox.evaluate, "harness_budget_s", lambda config: 3.0)  # less than the hang's own stage limit
        hung = session.evaluate(source("all_reduce_hang"), 0)
        first = session.evaluator.warm.process
        assert first is None  # ended with everything it kept
        monkeypatch.undo()
        after = session.evaluate(source("all_reduce_fp32"), 1)
        marker = session.box.marker
    assert hung.status == "timeout" and "timed out" in hung.message, hung.message
    assert after.status == "correct", after.message
    assert leftover_processes(marker) == []


@pytest.mark.parametrize("world", [2, 4, 8])
def test_a_step_finds_nothing_an_earlier_step_of_its_episode_left(world):
    """One model writes every step of an episode: through one warm harness, a step's candidate
    plants a file wherever it can write (its work folder, the folders above it, /tmp, /dev/shm,
    home), and the next step's is correct only where it finds one. It must not find any. The
    control: a step that plants and then seeks finds its own file; an honest step after all is correct."""
    with EvaluationSession(harness(world=world), warm=True) as session:
        reports = [session.evaluate(text, step) for step, text in enumerate(leftover_steps(source("all_reduce_fp32")))]
        marker = session.box.marker
    assert reports[0].status == "correct", reports[0].message  # planting is not a fault in itself
    assert reports[1].status != "correct" and "nothing left by the step before" in reports[1].message, reports[1].message
    assert reports[2].status == "correct", reports[2].message
    assert reports[3].status == "correct", reports[3].message
    assert leftover_processes(marker) == []
