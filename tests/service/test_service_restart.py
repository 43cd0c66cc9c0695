"""Nothing accepted is lost across a ``kill -9`` of the server: after a restart, queued jobs run,
the evaluation that was running runs again, the agent run that was running is marked interrupted
with the steps it had made, finished results are intact, and the processes the dead server left
are ended. Provider keys never reach a record, a run folder or a candidate."""

import json
import time

import pytest

from service.client import parse_sse
from tests.support.service import HANG, QUICK_EVAL, ServerProcess, wait_for

pytestmark = pytest.mark.slow
SECRET = "sk-kloop-test-secret-0123456789"


def test_kill_9_and_restart_loses_nothing(tmp_path):
    server = ServerProcess(tmp_path, "--cpu-slots", "2", "--run-workers", "1").start()
    try:
        token = server.token("crash")
        with server.client(token) as api:
            finished = api.post("/v1/evals", json=QUICK_EVAL).json()["id"]
            before = wait_for(api, finished)
            assert before["status"] == "done"
            hanging = api.post("/v1/evals", json=dict(QUICK_EVAL, source=HANG)).json()["id"]  # holds a CPU slot
            wait_for(api, hanging, statuses=("running",), timeout_s=120)
            run = api.post("/v1/runs", json={"problem": "all_reduce", "model": "scripted:demo", "steps": 2, "allow_nccl": True,
                                             "trials": 1, "timed": False}).json()["id"]
            queued = [api.post("/v1/evals", json=QUICK_EVAL).json()["id"] for _ in range(3)]
            # the run has made its first step (saved) and is on its second
            with api.stream("GET", f"/v1/jobs/{run}/events", timeout=300) as stream:
                for _, type_, data in parse_sse(stream.iter_lines()):
                    if type_ == "step":
                        break
            folder = server.folder / "data" / "jobs" / run
            deadline = time.monotonic() + 60  # the step is in the trajectory (saved just after its event)
            while not _saved_steps(folder) and time.monotonic() < deadline:
                time.sleep(0.05)
            assert server.sandbox_processes()
        server.kill9()
        left = server.sandbox_processes()
        assert left, "a dead server's sandboxes outlive it until the restart ends them"

        server.start()
        assert "recovered" in server.log()
        with server.client(token) as api:
            assert api.get(f"/v1/jobs/{finished}").json() == before  # finished results intact
            interrupted = wait_for(api, run, timeout_s=30)
            assert interrupted["status"] == "interrupted"
            assert [s["status"] for s in interrupted["result"]["steps"]][:1] == ["wrong"]  # its partial result
            assert interrupted["result"]["partial"] is True
            events = [(t, d) for _, t, d in parse_sse(api.get(f"/v1/jobs/{run}/events").iter_lines())]
            assert ("status", "interrupted") in [(t, d.get("status")) for t, d in events]
            again = wait_for(api, hanging, statuses=("running", "done", "failed"), timeout_s=120)
            assert again["attempts"] == 2  # the evaluation that was running runs again
            api.delete(f"/v1/jobs/{hanging}")
            for job_id in queued:
                job = wait_for(api, job_id, timeout_s=600)
                assert job["status"] == "done" and job["result"]["status"] == "correct" and job["attempts"] in (1, 2)
            assert len(api.get("/v1/jobs", params={"limit": 1000}).json()) == 6
        assert not set(left) & set(server.sandbox_processes())  # the dead server's processes were ended
    finally:
        server.stop()


def _saved_steps(folder):
    from agent.trajectory import find_trajectory

    try:
        return json.loads(find_trajectory(folder).read_text())["info"].get("steps")
    except (OSError, ValueError, KeyError):
        return None


LEAKY = """
import os, sys
import torch
def solution(tensor):
    sys.stderr.write("ENV " + repr(dict(os.environ)) + "\\n")
    raise RuntimeError("environment: " + " ".join(f"{k}={v}" for k, v in os.environ.items()))
"""


def test_provider_keys_stay_with_the_server(tmp_path):
    keys = tmp_path / "keys.env"
    keys.write_text(f"OPENAI_API_KEY={SECRET}\nOPENAI_BASE_URL=http://127.0.0.1:9/v1\n")
    keys.chmod(0o600)
    server = ServerProcess(tmp_path, "--cpu-slots", "1", "--keys-file", str(keys), env={"OPENAI_API_KEY": ""}).start()
    try:
        token = server.token("keys")
        with server.client(token) as api:
            run = api.post("/v1/runs", json={"problem": "all_reduce", "model": "openai:gpt-test", "steps": 3,
                                             "options": {"max_attempts": 1, "attempt_timeout_s": 5}})
            assert run.status_code == 201, run.text  # the key came from the keys file
            leak = api.post("/v1/evals", json=dict(QUICK_EVAL, source=LEAKY)).json()["id"]
            run_job = wait_for(api, run.json()["id"], timeout_s=300)
            leak_job = wait_for(api, leak, timeout_s=300)
            assert run_job["status"] == "done" and run_job["result"]["exit_status"] == "ProviderFailed"
            assert leak_job["result"]["status"] != "correct" and "environment:" in json.dumps(leak_job["result"])
            seen = json.dumps([api.get(f"/v1/jobs/{j}").json() for j in (run.json()["id"], leak)])
            seen += "".join(api.get(f"/v1/jobs/{j}/events").text for j in (run.json()["id"], leak))
            seen += api.get(f"/v1/runs/{run.json()['id']}/trajectory").text
        assert SECRET not in seen
        for path in tmp_path.rglob("*"):
            if path.is_file() and path != keys:
                assert SECRET.encode() not in path.read_bytes(), path
        # a key that got into a run or batch folder anyway (a provider's error message quoting it, say)
        # is answered as records are: redacted, by the API and the web page alike
        with server.client(token) as api:
            batch = api.post("/v1/batches", json={"config": {"models": ["scripted:demo"], "problems": ["all_reduce"], "steps": 1,
                                                            "allow_nccl": True, "trials": 1, "timed": False}}).json()["id"]
            assert wait_for(api, batch, timeout_s=300)["status"] == "done"
            run_id = run.json()["id"]
            run_folder, batch_folder = tmp_path / "data" / "jobs" / run_id, tmp_path / "data" / "jobs" / batch
            trajectory = next(run_folder.glob("*.traj.json"))
            planted = json.loads(trajectory.read_text())
            planted["info"]["leak"] = f"provider said: bad key {SECRET}"
            planted["messages"][0]["content"] += f" {SECRET}"
            trajectory.write_text(json.dumps(planted))
            (batch_folder / "report.html").write_text(f"<p>{SECRET}</p>")
            episode = next((batch_folder / "episodes").glob("*.json"))
            episode.write_text(episode.read_text().replace('"message": "', f'"message": "{SECRET} '))
            answers = [api.get(f"/v1/runs/{run_id}/trajectory").text, api.get(f"/v1/batches/{batch}/report").text,
                       api.get(f"/v1/batches/{batch}/results").text]
            web = server.client(None)
            web.cookies.set("kloop_token", token)
            answers += [web.get(f"/jobs/{run_id}").text, web.get(f"/jobs/{batch}").text, web.get(f"/jobs/{batch}/report.html").text]
            web.close()
        assert all(answer and SECRET not in answer for answer in answers), [a[:200] for a in answers if SECRET in a]
        assert "[redacted]" in answers[0] and "[redacted]" in answers[1] and "[redacted]" in answers[2]
    finally:
        server.stop()
