"""A real batch, offline on CPU (scripted and baseline models through the agent loop and the
harness): killed with SIGKILL in the middle, resumed, every episode recorded once, the summary's
pass@k and fast_p equal to the ones computed by hand from results.jsonl; then report and rejudge."""

import json
import os
import signal

import pytest

from tests.support.batch import kloop, naive_scores, read_records, start_batch, wait_for_lines

CONFIG = """
models: [scripted:demo, baseline:reference, baseline:oracle]
problems: [all_reduce]
samples: 2
steps: 2
world: 2
device: cpu
trials: 1
timing_precision: 0.5
allow_nccl: true
workers: 2
"""
MODELS = ("scripted:demo", "baseline:reference", "baseline:oracle")


@pytest.fixture(scope="module")
def batch(tmp_path_factory):
    root = tmp_path_factory.mktemp("batch")
    config, out = root / "batch.yaml", root / "out"
    config.write_text(CONFIG)
    process = start_batch(config, out, root / "first.log")
    try:
        seen = wait_for_lines(out / "results.jsonl", 2, process, timeout_s=900)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    assert process.returncode == -signal.SIGKILL, (root / "first.log").read_text()[-3000:]
    before = read_records(out / "results.jsonl")
    assert 2 <= len(before) < 6 and seen >= 2
    resumed = kloop("batch", str(config), "--out", str(out))
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    return {"root": root, "out": out, "before": before, "resumed": resumed, "config": config}


def test_every_episode_is_recorded_once_and_killed_ones_run_again(batch):
    out = batch["out"]
    records = read_records(out / "results.jsonl")
    assert sorted(r["id"] for r in records) == sorted({r["id"] for r in records})
    assert {(r["model"], r["sample"]) for r in records} == {(m, s) for m in MODELS for s in (0, 1)}
    by_id = {r["id"]: r for r in records}
    for old in batch["before"]:
        assert by_id[old["id"]] == old  # finished before the kill: never redone
    assert len(list((out / "episodes").glob("*.json"))) == 6
    assert f"{len(batch['before'])} already done" in batch["resumed"].stdout
    for r in records:
        assert list((out / r["run_dir"]).glob("trajectory*.json"))


def test_outcomes_are_what_the_models_do(batch):
    records = {(r["model"], r["sample"]): r for r in read_records(batch["out"] / "results.jsonl")}
    for sample in (0, 1):
        demo, reference, oracle = (records[(m, sample)] for m in MODELS)
        assert demo["steps"][0]["status"] == "wrong" and len(demo["steps"]) == 2
        assert reference["steps_used"] == 1
        for record in (demo, reference):
            if record["outcome"] == "correct":
                assert record["speedup"] > 0 and record["best_step"] == len(record["steps"])
            else:  # the judge's clock cross-check can reject even the reference on a machine loaded by other work
                assert record["failure_class"] == "rejected" and "clock" in record["message"], record
        assert oracle["outcome"] == "failed" and oracle["failure_class"] in ("crashed", "build_failed")  # CUDA code on CPU


def test_summary_matches_pass_at_k_and_fast_p_computed_by_hand(batch):
    records = read_records(batch["out"] / "results.jsonl")
    summary = json.loads((batch["out"] / "summary.json").read_text())
    for model in MODELS:
        expected, got = naive_scores(records, model, samples=2), summary["models"][model]
        for k in (1, 2):
            assert got["pass_at_k"][str(k)]["value"] == pytest.approx(expected[f"pass@{k}"])
        for p in ("0", "1", "1.5", "2"):
            assert got["fast_p"][p]["value"] == pytest.approx(expected[f"fast_{p}"])
        if expected["geomean"] is None:
            assert got["geomean_speedup"]["value"] is None
        else:
            assert got["geomean_speedup"]["value"] == pytest.approx(expected["geomean"], rel=1e-6)
    demo = summary["models"]["scripted:demo"]
    assert demo["per_step"][0]["correct"] == 0.0
    assert demo["per_step"][1]["correct"] == demo["correct_rate"]["value"] == sum(r["correct"] for r in records if r["model"] == "scripted:demo") / 2
    assert "leaderboard" in batch["resumed"].stdout and "baseline:reference" in batch["resumed"].stdout


def test_the_batch_timing_precision_reaches_every_episode(batch):
    configs = sorted((batch["out"] / "runs").glob("*/try*/config.json"))
    assert len(configs) >= 6
    assert {json.loads(path.read_text())["harness"]["timing_precision"] for path in configs} == {0.5}


def test_running_it_again_does_nothing_and_report_reads_the_folder(batch):
    again = kloop("batch", str(batch["config"]), "--out", str(batch["out"]))
    assert again.returncode == 0 and "6 already done" in again.stdout
    assert len(read_records(batch["out"] / "results.jsonl")) == 6
    html = batch["root"] / "elsewhere" / "r.html"
    html.parent.mkdir()
    report = kloop("report", str(batch["out"]), "--html", str(html))
    assert report.returncode == 0 and "scripted:demo" in report.stdout
    page = html.read_text()
    assert "<svg" in page and "../out/runs/" in page and "http" not in page.replace("http://www.w3.org/2000/svg", "")


def test_a_changed_config_is_refused(batch):
    changed = batch["root"] / "changed.yaml"
    changed.write_text(CONFIG.replace("steps: 2", "steps: 3"))
    refused = kloop("batch", str(changed), "--out", str(batch["out"]))
    assert refused.returncode == 2 and "another steps" in refused.stderr


def test_rejudge_scores_the_saved_solutions_again(batch):
    done = kloop("rejudge", str(batch["out"]), "--best-only")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "solutions judged again" in done.stdout
    new = {r["id"]: r for r in read_records(batch["out"] / "rejudge" / "results.jsonl")}
    old = {r["id"]: r for r in read_records(batch["out"] / "results.jsonl")}
    assert set(new) == set(old)
    for rid, record in old.items():
        assert new[rid]["correct"] == record["correct"]  # the judge did not change: neither did the verdicts
    assert json.loads((batch["out"] / "rejudge" / "summary.json").read_text())["models"]


def test_a_bash_mode_batch_scores_the_judged_submission(tmp_path):
    """``mode: bash``: the scripted shell session (a wrong first try, `check`, the fix, `bench`,
    `submit`) is one episode whose score is the full judge's verdict on what it submitted."""
    config = tmp_path / "bash.yaml"
    config.write_text("models: [scripted:bash-demo]\nproblems: [all_reduce]\nsamples: 1\nsteps: 10\nmode: bash\nworld: 2\n"
                      "device: cpu\ntrials: 2\nallow_nccl: true\n")
    done = kloop("batch", str(config), "--out", str(tmp_path / "out"))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    [record] = read_records(tmp_path / "out" / "results.jsonl")
    assert record["outcome"] == "correct" and record["correct"], record
    assert record["steps_used"] >= 5 and record["exit_status"] == "Submitted"
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert json.dumps(summary).count("scripted:bash-demo") >= 1
