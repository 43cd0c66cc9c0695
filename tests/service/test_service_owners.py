"""A job is its token's, against a real ``kloop serve`` on loopback (issue 17). Hostile: token B
reads, lists, streams, downloads and cancels token A's evaluation, run and batch, through the API
and the web page: every call is answered as for a job that does not exist (404), and A's jobs run
on to ``done``. Controls: A reads its own; an ``--admin`` token sees every job. The server's key
never appears in an answer, the new episode downloads included."""

import json
import os
import subprocess
import sys

import pytest

from tests.support.service import QUICK_EVAL, ROOT, ServerProcess, wait_for

pytestmark = pytest.mark.slow

SERVER_KEY = "sk-owner-test-0123456789abcdef"
RUN = {"problem": "all_reduce", "model": "scripted:demo", "steps": 2, "allow_nccl": True, "trials": 1, "timed": False}
BATCH = {"config": {"models": ["scripted:demo"], "problems": ["all_reduce"], "samples": 1, "steps": 2, "allow_nccl": True,
                    "trials": 1, "timed": False}}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    server = ServerProcess(tmp_path_factory.mktemp("owners"), "--cpu-slots", "2", "--run-workers", "2",
                           env={"OPENAI_API_KEY": SERVER_KEY, "ANTHROPIC_API_KEY": ""}).start()
    yield server
    server.stop()


def web_client(server, token):
    client = server.client(None)
    client.cookies.set("kloop_token", token)
    return client


def refused_everywhere(server, token, jobs: dict[str, str], run_dir: str | None) -> None:
    """Every way of reaching ``jobs`` with ``token`` answers as for a job that does not exist."""
    with server.client(token) as api, web_client(server, token) as web:
        for kind, job_id in jobs.items():
            for method, path in (("GET", f"/v1/jobs/{job_id}"), ("GET", f"/v1/jobs/{job_id}/events"),
                                 ("DELETE", f"/v1/jobs/{job_id}")):
                response = api.request(method, path)
                assert response.status_code == 404, (kind, method, path, response.status_code, response.text)
                assert response.json()["detail"] == f"no job {job_id!r}"  # word for word what an absent job gets
            page = web.get(f"/jobs/{job_id}")
            absent = web.get("/jobs/eval-0123456789ab")
            assert page.status_code == absent.status_code == 404
            assert page.text.replace(job_id, "ID") == absent.text.replace("eval-0123456789ab", "ID")  # the same "not found" page
        assert api.get(f"/v1/runs/{jobs['run']}/trajectory").status_code == 404
        batch = jobs["batch"]
        paths = [f"/v1/batches/{batch}/results", f"/v1/batches/{batch}/report"]
        if run_dir:
            paths += [f"/v1/batches/{batch}/{run_dir}/trajectory", f"/v1/batches/{batch}/{run_dir}/best"]
        for path in paths:
            response = api.get(path)
            assert response.status_code == 404 and response.json()["detail"] == f"no job {batch!r}", (path, response.text)
        assert web.get(f"/jobs/{batch}/report.html").status_code == 404
        if run_dir:
            assert web.get(f"/jobs/{batch}/{run_dir}").status_code == 404
        listed = {j["id"] for j in api.get("/v1/jobs", params={"limit": 1000}).json()}
        listed |= {j["id"] for j in api.get("/v1/jobs", params={"limit": 1000, "mine": True}).json()}
        page = web.get("/").text + web.get("/", params={"partial": "rows"}).text
        for job_id in jobs.values():
            assert job_id not in listed and job_id not in page


def test_another_token_cannot_see_read_or_cancel_a_job(server):
    alice, bob = server.token("alice"), server.token("bob")
    with server.client(alice) as api:
        jobs = {"eval": api.post("/v1/evals", json=QUICK_EVAL).json()["id"], "run": api.post("/v1/runs", json=RUN).json()["id"],
                "batch": api.post("/v1/batches", json=BATCH).json()["id"]}
        refused_everywhere(server, bob, jobs, None)  # while they are queued or running: the cancels above hit nothing
        ended = {kind: wait_for(api, job_id, timeout_s=900) for kind, job_id in jobs.items()}
        assert {kind: job["status"] for kind, job in ended.items()} == {"eval": "done", "run": "done", "batch": "done"}
        assert all(job["owner"] == "alice" and not job["error"] for job in ended.values())
        records = api.get(f"/v1/batches/{jobs['batch']}/results").json()
        run_dir = records[0]["run_dir"]
        assert records[0]["correct"] and run_dir.startswith("runs/")
        # now there are results, reports and trajectories to take: still nothing for bob
        refused_everywhere(server, bob, jobs, run_dir)
        # honest control: alice reads her own, everywhere
        assert {j["id"] for j in api.get("/v1/jobs", params={"limit": 1000}).json()} >= set(jobs.values())
        assert api.get(f"/v1/jobs/{jobs['eval']}").json()["result"]["status"] == "correct"
        assert [t for t in api.get(f"/v1/jobs/{jobs['run']}/events").text.split("\n") if t.startswith("event: end")]
        assert api.get(f"/v1/runs/{jobs['run']}/trajectory").json()["info"]["job"] == jobs["run"]
        assert api.get(f"/v1/batches/{jobs['batch']}/report").status_code == 200
        trajectory = api.get(f"/v1/batches/{jobs['batch']}/{run_dir}/trajectory")
        assert trajectory.status_code == 200 and trajectory.json()["messages"][-1]["role"] == "exit"
        assert "def solution" in api.get(f"/v1/batches/{jobs['batch']}/{run_dir}/best").text
        assert api.get(f"/v1/batches/{jobs['batch']}/runs/..%2F..%2F/try1/trajectory").status_code == 404
        assert api.get(f"/v1/batches/{jobs['batch']}/runs/x/try1/trajectory").status_code == 404
        assert api.delete(f"/v1/jobs/{jobs['eval']}").json()["status"] == "done"  # hers to cancel (ended: unchanged)
    with web_client(server, alice) as web:
        page = web.get("/").text
        assert all(job_id in page for job_id in jobs.values())
        for job_id in jobs.values():
            assert web.get(f"/jobs/{job_id}").status_code == 200
        assert web.get(f"/jobs/{jobs['batch']}/report.html").status_code == 200
        assert web.get(f"/jobs/{jobs['batch']}/{run_dir}").status_code == 200
    with server.client(bob) as api:  # bob's own jobs are his: the rule is not "nobody sees anything"
        own = api.post("/v1/evals", json=QUICK_EVAL).json()["id"]
        assert wait_for(api, own)["owner"] == "bob"
        assert [j["id"] for j in api.get("/v1/jobs").json()] == [own]


def test_an_admin_token_sees_every_job(server, tmp_path):
    made = subprocess.run([sys.executable, "-m", "agent", "serve", "token", "create", "operator", "--admin", "--db", str(server.db)],
                          capture_output=True, text=True, cwd=ROOT, timeout=120, env={**os.environ, "COLUMNS": "200"})
    assert made.returncode == 0, made.stderr
    admin = made.stdout.strip()
    carol = server.token("carol")
    with server.client(carol) as api:
        job_id = api.post("/v1/evals", json=QUICK_EVAL).json()["id"]
        wait_for(api, job_id)
    with server.client(admin) as api:
        assert api.get(f"/v1/jobs/{job_id}").json()["owner"] == "carol"
        assert job_id in {j["id"] for j in api.get("/v1/jobs", params={"limit": 1000}).json()}
        assert job_id not in {j["id"] for j in api.get("/v1/jobs", params={"mine": True}).json()}
    with web_client(server, admin) as web:
        assert job_id in web.get("/").text and web.get(f"/jobs/{job_id}").status_code == 200
    listed = subprocess.run([sys.executable, "-m", "agent", "serve", "token", "list", "--db", str(server.db)],
                            capture_output=True, text=True, cwd=ROOT, timeout=120, env={**os.environ, "COLUMNS": "200"})
    lines = {line.split()[0]: line for line in listed.stdout.splitlines()}
    assert "admin" in lines["operator"].split() and "admin" not in lines["carol"].split()
    helped = subprocess.run([sys.executable, "-m", "agent", "serve", "token", "create", "--help"], capture_output=True, text=True,
                            cwd=ROOT, timeout=120, env={**os.environ, "COLUMNS": "200"})
    assert "--admin" in helped.stdout and "every token's jobs" in helped.stdout


def test_episode_downloads_never_carry_the_servers_key(server):
    """Files of a run folder are answered as records are: a key that reached one is redacted."""
    token = server.token("dave")
    with server.client(token) as api:
        job_id = api.post("/v1/batches", json=BATCH).json()["id"]
        assert wait_for(api, job_id, timeout_s=900)["status"] == "done"
        run_dir = api.get(f"/v1/batches/{job_id}/results").json()[0]["run_dir"]
        run = server.folder / "data" / "jobs" / job_id / run_dir
        trajectory = next(run.glob("*.traj.json"))
        data = json.loads(trajectory.read_text())
        data["info"]["leaked"] = f"provider said: bad key {SERVER_KEY}"
        trajectory.write_text(json.dumps(data))
        (run / "best" / "solution.py").write_text((run / "best" / "solution.py").read_text() + f"\n# {SERVER_KEY}\n")
        answers = [api.get(f"/v1/batches/{job_id}/{run_dir}/trajectory").text, api.get(f"/v1/batches/{job_id}/{run_dir}/best").text]
        assert all(SERVER_KEY not in text and "[redacted]" in text for text in answers), answers
