"""Batch jobs of the service are agent/batch's batches: the same config and its checks (in process),
and against a real ``kloop serve`` on loopback: a batch submitted by ``kloop batch --server``
runs through the API and leaves what ``kloop batch`` leaves (summary.json with pass@k and fast_p,
results.jsonl, report.html), the web page shows its leaderboard and embeds the report; Ctrl-C
cancels it on the server; after a kill -9 of the server it resumes without redoing finished
episodes."""

import html
import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from service.client import parse_sse
from tests.support.batch import hand_fixture, naive_scores, read_records, write_batch_folder
from tests.support.service import ROOT, ServerProcess, wait_for

CONFIG = {"models": ["scripted:demo", "scripted:example"], "problems": ["all_reduce"], "samples": 2, "steps": 2, "allow_nccl": True,
          "trials": 1, "timed": False}


@pytest.fixture
def evaluations(tmp_path):
    from service.evaluations import Evaluations

    return Evaluations((), cpu_slots=1, workdir=str(tmp_path))


@pytest.mark.parametrize("change, message", [
    ({"models": []}, "config: models: List should have at least 1 item"),
    ({"problems": ["nope"]}, "no problem named 'nope'"),
    ({"problems": ["category:nothing"]}, "unknown category 'nothing'"),
    ({"world": 3}, "defined for world sizes 2, 4, 8"),
    ({"size": "huge"}, "has no size 'huge'"),
    ({"device": "cuda"}, "needs 2 GPU(s); this server has no GPUs"),
    ({"mode": "bash"}, "config.mode: bash mode is not offered by the service"),
    ({"surprise": 1}, "surprise: unknown field"),
    ({"budget": {"steps": 3}}, "budget.steps: use the top-level `steps`"),
    ({"models": ["scripted:demo", "scripted:demo"]}, "model labels repeat"),
    ({"models": ["openai:gpt-5"]}, "OPENAI_API_KEY"),
    ({"models": [{"spec": "scripted:demo", "options": {"api_key": "mine"}}]}, "options api_key are not accepted"),
    ({"models": ["replay:/etc/passwd"]}, "replay: models are not offered over the API"),
    ({"models": ["scripted:/etc/hostname"]}, "never a path"),
    ({"sandbox": "docker"}, "config.sandbox: the server decides where candidates run"),
    ({"gpus": "0,1", "pkb_root": "/tmp"}, "config.gpus, config.pkb_root: the server decides"),
    ({"samples": 1000, "problems": ["all"]}, "a batch on this server has at most 2000"),
])
def test_a_batch_config_is_checked_as_kloop_batch_checks_it(evaluations, monkeypatch, change, message):
    from service.batches import check_batch
    from service.jobs import RequestRejected

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(RequestRejected) as caught:
        check_batch({**CONFIG, **change}, evaluations)
    assert message in str(caught.value)


def test_a_good_config_is_agent_batchs_config(evaluations):
    from agent.batch.config import BatchConfig
    from service.batches import check_batch

    checked = check_batch({**CONFIG, "sandbox": "local"}, evaluations)  # the default backend may be named
    assert isinstance(checked.config, BatchConfig) and len(checked.episodes) == 4
    assert checked.title == "batch: 2 model(s) x 1 problem(s) x 2"
    assert {e.id for e in checked.episodes} == {f"scripted-{m}__all_reduce__s{s}" for m in ("demo", "example") for s in (0, 1)}


def test_a_scripted_model_cannot_name_a_file_of_the_server(tmp_path):
    """Hostile: ``scripted:<path>`` makes the server play any YAML file it can read as the model's
    answers (shown in the run view and trajectory). Only the scripts it ships, by name, pass."""
    from pydantic import ValidationError

    from agent.providers import make_model
    from service.models import RunRequest

    secret = tmp_path / "secret.yaml"
    secret.write_text("- 'the server operator secret 1234'\n")
    hostile = {"problem": "all_reduce", "model": f"scripted:{secret}"}
    # what the old check let through: the model plays the server's file
    assert "operator secret" in make_model(hostile["model"]).complete([{"role": "user", "content": "hi"}]).text
    with pytest.raises(ValidationError, match="never a path"):
        RunRequest.model_validate(hostile)
    with pytest.raises(ValidationError, match="never a path"):
        RunRequest.model_validate({**hostile, "model": "scripted:secret.yaml"})  # relative to the server's folder
    assert RunRequest.model_validate({**hostile, "model": "scripted:demo"}).model == "scripted:demo"  # control




@pytest.fixture(scope="module")
def server(tmp_path_factory):
    server = ServerProcess(tmp_path_factory.mktemp("batches"), "--cpu-slots", "2", "--run-workers", "2").start()
    yield server
    server.stop()


def kloop_batch(config_path, out, server, token, **popen):
    return subprocess.Popen([sys.executable, "-m", "agent", "batch", str(config_path), "--out", str(out), "--server", server.url],
                            cwd=ROOT, env={**os.environ, "KLOOP_TOKEN": token, "COLUMNS": "200"}, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, **popen)


def job_of(api, kind="batch"):
    return [j for j in api.get("/v1/jobs", params={"limit": 1000}).json() if j["kind"] == kind][0]


@pytest.mark.slow
def test_kloop_batch_with_server_runs_it_there_as_kloop_batch_would(server, tmp_path):
    import yaml

    token = server.token("batcher")
    config_path = tmp_path / "batch.yaml"
    config_path.write_text(yaml.safe_dump(CONFIG))
    out = tmp_path / "out"
    process = kloop_batch(config_path, out, server, token)
    stdout, stderr = process.communicate(timeout=900)
    assert process.returncode == 0, stdout + stderr
    assert "4 episodes, 0 already done" in stdout and "leaderboard" in stdout
    finished = [line for line in stdout.splitlines() if re.match(r"^\s*(correct|failed) scripted-(demo|example)__all_reduce__s[01] ", line)]
    assert len(finished) == 4, stdout  # one line an episode, as locally

    with server.client(token) as api:
        job = job_of(api)
        assert job["status"] == "done" and job["title"] == "batch: 2 model(s) x 1 problem(s) x 2"
        folder = server.folder / "data" / "jobs" / job["id"]
        summary = json.loads((folder / "summary.json").read_text())
        # the job's result and the local copy are the batch folder's summary.json, as `kloop batch` writes it
        assert {k: v for k, v in job["result"].items() if k != "progress"} == summary == json.loads((out / "summary.json").read_text())
        assert job["result"]["progress"]["finished"] == job["result"]["progress"]["total"] == 4
        records = read_records(folder / "results.jsonl")
        assert sorted(r["id"] for r in records) == sorted(r["id"] for r in read_records(out / "results.jsonl"))
        for model in ("scripted:demo", "scripted:example"):
            expected, got = naive_scores(records, model, 2), summary["models"][model]
            assert got["pass_at_k"]["1"]["value"] == pytest.approx(expected["pass@1"])
            assert got["pass_at_k"]["2"]["value"] == pytest.approx(expected["pass@2"])
            assert got["fast_p"]["0"]["value"] == pytest.approx(expected["fast_0"])
            assert got["fast_p"]["1"]["value"] == pytest.approx(expected["fast_1"])
        # the local report links to local copies of the episodes' files: every link resolves here
        local_report = (out / "report.html").read_text()
        assert "<svg" in local_report and str(server.folder) not in local_report  # no path of the server's
        links = [html.unescape(link) for link in re.findall(r'href="([^"#][^"]*)"', local_report)]
        assert sorted(link for link in links if link.endswith(".traj.json")) == sorted(f"{r['run_dir']}/trajectory.traj.json" for r in records)
        assert len([link for link in links if link.endswith("best/solution.py")]) == sum(r["correct"] for r in records) >= 1
        assert all((out / link).is_file() for link in links), [link for link in links if not (out / link).is_file()]
        for r in records:  # each the server's file (redacted as every answer is)
            assert json.loads((out / r["run_dir"] / "trajectory.traj.json").read_text()) == \
                json.loads(next((folder / r["run_dir"]).glob("*.traj.json")).read_text())
        events = [(t, d) for _, t, d in parse_sse(api.get(f"/v1/jobs/{job['id']}/events").iter_lines())]
        types = [t for t, _ in events]
        assert types.count("batch_started") == 1 and types.count("episode_started") == 4 and types.count("episode") == 4
        steps = [d for t, d in events if t == "step"]  # each step's verdict as it happens, with its episode
        assert len(steps) == sum(len(r["steps"]) for r in records) >= 4
        made = {(r["id"], p["step"], p["status"]) for r in records for p in r["steps"]}
        assert {(d["episode"], d["step"], str(d.get("status"))) for d in steps} == made
        assert types[-1] == "end" and events[-1][1]["status"] == "done"
        # the web page: agent/batch's leaderboard, its report embedded, each episode's run view
        web = server.client(None)
        web.cookies.set("kloop_token", token)
        page = web.get(f"/jobs/{job['id']}").text
        assert "Leaderboard" in page and "4 of 4 episodes" in page and f'src="/jobs/{job["id"]}/report.html"' in page
        assert page.count("<polyline") == 2 and "pass@1" in page
        assert web.get(f"/jobs/{job['id']}/report.html").text == (folder / "report.html").read_text()
        run_dir = records[0]["run_dir"]
        episode = web.get(f"/jobs/{job['id']}/{run_dir}")
        assert episode.status_code == 200 and "Step 1" in episode.text and "Step 2" in episode.text
        assert web.get(f"/jobs/{job['id']}/runs/..%2F..%2F/try1").status_code == 404
        assert web.get(f"/jobs/{job['id']}/runs/../try1").status_code == 404
        assert api.get(f"/v1/batches/{job['id']}/results").json() == [r for r in sorted(records, key=lambda r: (r["model"], r["sample"]))]
        assert api.get("/v1/batches/eval-x/results").status_code == 404
        web.close()
    # the local folder is one `kloop report` reads
    report = subprocess.run([sys.executable, "-m", "agent", "report", str(out), "--html", str(tmp_path / "again.html")], cwd=ROOT,
                            capture_output=True, text=True, timeout=300, env={**os.environ, "COLUMNS": "200"})
    assert report.returncode == 0 and "scripted:demo" in report.stdout and "scripted:example" in report.stdout, report.stderr
    # the same command again follows the same job (DIR/server.json names it): no second batch
    before = {path: path.read_text() for path in out.rglob("*") if path.is_file()}
    again = kloop_batch(config_path, out, server, token)
    stdout, stderr = again.communicate(timeout=900)
    assert again.returncode == 0, stdout + stderr
    assert f"is the copy of batch job {job['id']}" in stdout and "following it again" in stdout and "(0 fetched now)" in stdout, stdout
    with server.client(token) as api:
        assert [j["id"] for j in api.get("/v1/jobs").json() if j["kind"] == "batch"] == [job["id"]]
    after = {path: path.read_text() for path in out.rglob("*") if path.is_file()}
    assert set(after) == set(before) and all(after[p] == before[p] for p in before if p.name != "report.html")
    # user mistakes: one line, exit 2
    for extra, config, message in ((["--filter", "demo"], CONFIG, "--filter: not offered with --server"),
                                   ([], {**CONFIG, "sandbox": "docker"}, "config.sandbox: the server decides where candidates run")):
        config_path.write_text(yaml.safe_dump(config))
        refused = subprocess.run([sys.executable, "-m", "agent", "batch", str(config_path), "--out", str(tmp_path / "no"), "--server",
                                  server.url, *extra], cwd=ROOT, capture_output=True, text=True, timeout=300,
                                 env={**os.environ, "KLOOP_TOKEN": token, "COLUMNS": "300"})
        assert refused.returncode == 2 and message in refused.stderr and "Traceback" not in refused.stderr, refused.stderr


@pytest.mark.slow
def test_kloop_batch_with_server_refuses_a_folder_holding_another_batch(server, tmp_path):
    """A local batch, another server's copy, another config's, or a job this token is not given:
    refused with one line saying why and what to do, before anything is submitted or written."""
    import yaml

    from service.batch_copy import mark

    token = server.token("careful")
    config_path = tmp_path / "batch.yaml"
    config_path.write_text(yaml.safe_dump(CONFIG))
    local = write_batch_folder(tmp_path / "local", hand_fixture())
    mark(tmp_path / "elsewhere", "http://127.0.0.1:9/", "batch-0123456789ab", CONFIG)
    mark(tmp_path / "other-config", server.url, "batch-0123456789ab", {**CONFIG, "samples": 5})
    mark(tmp_path / "not-given", server.url, "batch-0123456789ab", CONFIG)
    cases = ((local, "holds a local batch (config.yaml, episodes, results.jsonl, runs)", "resume it here without --server"),
             (tmp_path / "elsewhere", "of another server (http://127.0.0.1:9)", "--server http://127.0.0.1:9 to follow that job"),
             (tmp_path / "other-config", "a batch of another config", "choose another --out"),
             (tmp_path / "not-given", "the server does not give it to this token", "choose another --out"))
    for out, why, what in cases:
        before = {path: path.read_bytes() for path in out.rglob("*") if path.is_file()}
        process = kloop_batch(config_path, out, server, token)
        stdout, stderr = process.communicate(timeout=300)
        assert process.returncode == 2 and why in stderr and what in stderr, (out, stdout, stderr)
        assert "Traceback" not in stderr and len(stderr.strip().splitlines()) <= 3, stderr
        assert {path: path.read_bytes() for path in out.rglob("*") if path.is_file()} == before  # nothing overwritten
    with server.client(token) as api:
        assert api.get("/v1/jobs").json() == []  # nothing submitted
    # the other way round: a local batch into a server batch's copy is refused too
    local_run = subprocess.run([sys.executable, "-m", "agent", "batch", str(config_path), "--out", str(tmp_path / "not-given")],
                               cwd=ROOT, capture_output=True, text=True, timeout=300, env={**os.environ, "COLUMNS": "300"})
    assert local_run.returncode == 2 and "is the copy of batch job batch-0123456789ab" in local_run.stderr, local_run.stderr
    assert not (tmp_path / "not-given" / "results.jsonl").exists()


def test_a_server_answer_never_picks_where_the_copy_writes():
    """Hostile: a server's results name run folders outside DIR; they are not fetched."""
    from service.batch_copy import run_parts

    for hostile in ("../../etc", "runs/../../x/try1", "/abs/runs/a/try1", "runs/a/../b", "runs/.ssh/try1", "runs/a\\..\\b/try1",
                    "runs/a/try1/extra", None, 3):
        assert run_parts(hostile) is None, hostile
    assert run_parts("runs/scripted-demo__all_reduce__s0/try1") == ("scripted-demo__all_reduce__s0", "try1")  # control


@pytest.mark.slow
def test_ctrl_c_cancels_the_batch_on_the_server(tmp_path):
    import yaml

    server = ServerProcess(tmp_path / "server", "--cpu-slots", "1", "--run-workers", "1")
    (tmp_path / "server").mkdir()
    server.start()
    try:
        token = server.token("impatient")
        config_path = tmp_path / "batch.yaml"
        config_path.write_text(yaml.safe_dump({**CONFIG, "samples": 4, "workers": 1}))
        process = kloop_batch(config_path, tmp_path / "out", server, token, start_new_session=True)
        with server.client(token) as api:
            deadline = time.monotonic() + 600
            while time.monotonic() < deadline:
                jobs = [j for j in api.get("/v1/jobs").json() if j["kind"] == "batch"]
                if jobs and (jobs[0]["result"] or {}).get("progress", {}).get("finished"):
                    break
                time.sleep(0.5)
            job_id = jobs[0]["id"]
            os.killpg(process.pid, signal.SIGINT)
            stdout, stderr = process.communicate(timeout=120)
            assert process.returncode == 130, stdout + stderr
            assert f"cancelling job {job_id} on the server" in stderr and f"job {job_id}: cancelled" in stderr
            job = api.get(f"/v1/jobs/{job_id}").json()
            assert job["status"] == "cancelled"
            folder = server.folder / "data" / "jobs" / job_id
            finished = job["result"]["progress"]["finished"]
            assert 1 <= finished < 8 and job["result"]["episodes"] == finished  # the summary of what finished
            assert json.loads((folder / "summary.json").read_text())["episodes"] == finished
            lines = (folder / "results.jsonl").read_text()
            time.sleep(5)
            assert (folder / "results.jsonl").read_text() == lines  # nothing runs on
    finally:
        server.stop()


@pytest.mark.slow
def test_a_batch_resumes_after_kill_9_without_redoing_finished_episodes(tmp_path):
    server = ServerProcess(tmp_path, "--cpu-slots", "1", "--run-workers", "1").start()
    try:
        token = server.token("crash")
        with server.client(token) as api:
            config = {**CONFIG, "models": ["scripted:demo"], "samples": 3, "workers": 1}
            job_id = api.post("/v1/batches", json={"config": config}).json()["id"]
            folder = server.folder / "data" / "jobs" / job_id
            deadline = time.monotonic() + 600
            while not (folder / "results.jsonl").exists() or not (folder / "results.jsonl").read_text().strip():
                assert time.monotonic() < deadline
                time.sleep(0.2)
        server.kill9()
        before = {path.name: path.read_text() for path in (folder / "episodes").glob("*.json")}
        assert 1 <= len(before) < 3
        server.start()
        with server.client(token) as api:
            job = wait_for(api, job_id, timeout_s=900)
            assert job["status"] == "done" and job["attempts"] == 2
            assert job["result"]["episodes"] == 3 and job["result"]["models"]["scripted:demo"]["pass_at_k"]["3"]["value"] == 1.0
            events = [(t, d) for _, t, d in parse_sse(api.get(f"/v1/jobs/{job_id}/events").iter_lines())]
            second_start = [d for t, d in events if t == "batch_started"][-1]
            assert len(second_start["done"]) == len(before)
        records = read_records(folder / "results.jsonl")
        assert sorted(r["id"] for r in records) == [f"scripted-demo__all_reduce__s{s}" for s in range(3)]  # each once
        for name, text in before.items():  # finished episodes were not run again
            assert (folder / "episodes" / name).read_text() == text
            assert [p.name for p in (folder / "runs" / name.removesuffix(".json")).iterdir()] == ["try1"]
    finally:
        server.stop()
