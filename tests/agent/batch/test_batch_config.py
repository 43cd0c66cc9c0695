"""The batch config (clear one-line errors), episode enumeration, the kill-safe store, the
baseline pseudo-models, per-provider call caps and failure classification."""

import json
import threading
import time

import pytest

from agent.batch.config import Mode, load_config, parse_config
from agent.batch.episode import EpisodeContext, GatedModel, ProviderGates, is_harness_failure
from agent.batch.episodes import enumerate_episodes, matches
from agent.batch.store import ResultStore
from agent.errors import UserError
from agent.providers import BaselineUnavailable, make_model
from problems import get_problem
from sandbox.report import EvalReport
from tests.support.batch import result

BASE = {"models": ["scripted:demo"], "problems": ["all_reduce"]}


def test_strings_and_mappings_are_models_and_baseline_reference_gets_nccl():
    config = parse_config({**BASE, "models": ["scripted:demo", {"spec": "openai:gpt-5", "label": "gpt5-high",
                                                                "options": {"reasoning_effort": "high"}}, "baseline:reference"]})
    assert [m.label for m in config.models] == ["scripted:demo", "gpt5-high", "baseline:reference"]
    assert config.models[2].allow_nccl is True and config.models[0].allow_nccl is None
    assert config.mode is Mode.loop and config.cap("openai") == 8


@pytest.mark.parametrize("data,message", [
    ({**BASE, "samples": 0}, "samples: Input should be greater than or equal to 1"),
    ({**BASE, "modes": "loop"}, "modes: unknown field (a typo?)"),
    ({**BASE, "mode": "chat"}, "mode: Input should be 'loop', 'single' or 'bash'"),
    ({**BASE, "models": ["gpt-5"]}, "is not provider:model"),
    ({**BASE, "models": ["scripted:demo", "scripted:demo"]}, "model labels repeat (scripted:demo)"),
    ({**BASE, "budget": {"max_cost_usd": -1}}, "max_cost_usd"),
    ({**BASE, "budget": {"steps": 3}}, "use the top-level `steps`"),
    ({"problems": ["all_reduce"]}, "models: Field required"),
    ([1, 2], "must be a YAML mapping"),
])
def test_config_errors_are_one_clear_line(data, message):
    with pytest.raises(UserError) as caught:
        parse_config(data, "b.yaml")
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_bad_yaml_and_missing_file(tmp_path):
    (tmp_path / "bad.yaml").write_text("models: [a\n")
    with pytest.raises(UserError, match="not valid YAML"):
        load_config(tmp_path / "bad.yaml")
    with pytest.raises(UserError, match="no batch config"):
        load_config(tmp_path / "none.yaml")


def test_single_mode_is_one_step():
    assert parse_config({**BASE, "mode": "single", "steps": 5}).steps == 1


def test_episodes_are_models_x_problems_x_samples_with_stable_ids():
    config = parse_config({"models": ["scripted:demo", "baseline:oracle"], "problems": ["category:collective", "all_reduce"],
                           "samples": 2, "seed": 3})
    episodes = enumerate_episodes(config)
    collective = [p for p in {e.problem for e in episodes}]
    assert len(episodes) == 2 * 2 * len(collective) and "all_reduce" in collective
    assert len({e.id for e in episodes}) == len(episodes)
    assert episodes[0].id == "scripted-demo__all_gather__s0" and episodes[-1].sample == 1
    same = [e for e in episodes if e.problem == "all_reduce" and e.sample == 1]
    assert len({e.seed for e in same}) == 1  # every model is judged on the same inputs
    assert enumerate_episodes(config) == episodes
    assert [e.id for e in episodes if matches(e, "oracle__all_reduce")] == ["baseline-oracle__all_reduce__s0", "baseline-oracle__all_reduce__s1"]


def test_unknown_problem_or_category_is_a_user_error():
    with pytest.raises(UserError, match="did you mean all_reduce"):
        enumerate_episodes(parse_config({**BASE, "problems": ["all_reduse"]}))
    with pytest.raises(UserError, match="unknown category 'nope'"):
        enumerate_episodes(parse_config({**BASE, "problems": ["category:nope"]}))


def test_store_survives_a_torn_line_a_missing_line_and_duplicates(tmp_path):
    config = parse_config(BASE)
    store = ResultStore(tmp_path).open(config, "x")
    first, second, third = (result("m", "all_reduce", i, "failed") for i in range(3))
    store.record(first)
    store.record(second)
    # a kill after the third episode's file but before its line, with a torn line and a duplicate left behind
    (tmp_path / "episodes" / f"{third.id}.json").write_text(third.model_dump_json())
    with (tmp_path / "results.jsonl").open("a") as handle:
        handle.write(first.model_dump_json() + "\n" + '{"id": "m__all_red')
    again = ResultStore(tmp_path).open(config, "x")
    lines = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    assert sorted(r["id"] for r in lines) == sorted([first.id, second.id, third.id])
    assert set(again.finished) == {first.id, second.id, third.id}
    with pytest.raises(RuntimeError, match="already recorded"):
        again.record(first)


def test_store_refuses_a_config_that_changes_the_episodes_but_allows_more_models(tmp_path):
    ResultStore(tmp_path).open(parse_config({**BASE, "steps": 2}), "steps: 2")
    ResultStore(tmp_path).open(parse_config({**BASE, "steps": 2, "samples": 3, "models": ["scripted:demo", "baseline:oracle"]}), "more")
    with pytest.raises(UserError, match="another steps"):
        ResultStore(tmp_path).open(parse_config({**BASE, "steps": 3}), "steps: 3")


def test_infra_attempts_tries_and_redo(tmp_path):
    store = ResultStore(tmp_path).open(parse_config(BASE), "x")
    lost = result("m", "p", 0, "infra")
    store.record_infra_attempt(lost)
    (tmp_path / "runs" / lost.id / "try1").mkdir(parents=True)
    assert store.infra_attempts(lost.id) == 1 and store.next_try(lost.id) == 2
    store.record(lost)
    reopened = ResultStore(tmp_path).open(parse_config(BASE), "x")
    assert reopened.infra_attempts(lost.id) == 1 and lost.id in reopened.finished
    reopened.forget({lost.id})
    assert lost.id not in ResultStore(tmp_path).open(parse_config(BASE), "x").finished
    assert (tmp_path / "results.jsonl").read_text() == ""


def test_baselines_answer_with_the_problems_own_files():
    problem = get_problem("all_reduce")
    reference = make_model("baseline:reference", problem=problem).complete([])
    assert problem.reference_source.strip() in reference.text and reference.cost_usd == 0.0
    oracle = make_model("baseline:oracle", problem=problem).complete([])
    assert problem.oracle_path.read_text().strip() in oracle.text
    without = next(p for p in __import__("problems").all_problems() if p.oracle_path is None)
    with pytest.raises(BaselineUnavailable, match="no hand-written oracle"):
        make_model("baseline:oracle", problem=without)


def test_baseline_answers_are_extracted_as_solutions():
    from agent.extract import extract_solution

    problem = get_problem("all_reduce")
    source = extract_solution(make_model("baseline:reference", problem=problem).complete([]).text)
    assert source.strip() == problem.reference_source.strip()


def test_provider_gates_cap_concurrent_calls():
    config = parse_config({**BASE, "concurrency": {"slow": 2}})
    gates = ProviderGates(config)
    active, peak, lock = [0], [0], threading.Lock()

    class Slow:
        spec, name = "slow:x", "x"

        def complete(self, messages, tools=None):
            with lock:
                active[0] += 1
                peak[0] = max(peak[0], active[0])
            time.sleep(0.05)
            with lock:
                active[0] -= 1
            return "ok"

    models = [GatedModel(Slow(), gates.gate("slow")) for _ in range(6)]
    threads = [threading.Thread(target=m.complete, args=([],)) for m in models]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert peak[0] == 2 and models[0].spec == "slow:x" and gates.gate("slow") is gates.gate("slow")


def test_harness_failures_are_told_from_candidate_crashes():
    common = dict(problem="all_reduce", world=2, device="cpu", dtype="bfloat16", size="small")
    assert is_harness_failure(EvalReport(status="crashed", message="the harness exited with code 1 without a report", **common))
    assert is_harness_failure(EvalReport(status="timeout", message="the harness timed out without a report", **common))
    assert not is_harness_failure(EvalReport(status="crashed", stage="correctness", message="rank 1 died: SIGSEGV", **common))
    assert not is_harness_failure(EvalReport(status="wrong", message="the harness says wrong", **common))


def test_an_exception_in_an_episode_is_infrastructure_and_keeps_its_traceback(tmp_path, monkeypatch):
    from agent.batch import episode as episode_module

    config = parse_config(BASE)
    ep = enumerate_episodes(config)[0]

    def boom(ctx):
        raise RuntimeError("disk on fire")

    monkeypatch.setitem(episode_module.RUNNERS, Mode.loop, boom)
    ctx = EpisodeContext(episode=ep, config=config, folder=tmp_path, attempt=1)
    outcome = episode_module.run_episode(ctx)
    assert outcome.outcome == "infra" and outcome.failure_class == "infra:internal" and "disk on fire" in outcome.message
    assert "RuntimeError" in (ctx.run_dir / "error.txt").read_text()
