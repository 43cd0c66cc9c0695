"""The agent loop end to end on CPU: real models (scripted, or the real OpenAI SDK on a local
HTTP server), the real harness, trajectories on disk."""

import json
import signal
import subprocess
import sys
import time

import psutil
import pytest

from agent.budget import Budget
from agent.control import FormatError, Truncated
from agent.extract import extract_solution
from agent.loop import Agent
from agent.providers import make_model
from agent.run_config import RunConfig
from agent.session import EvaluationSession
from agent.trajectory import Trajectory
from problems import get_problem
from sandbox.harness.config import HarnessConfig
from sandbox.report import EvalReport
from tests.support.providers_http import LocalServer, anthropic_message, fast_policy, openai_completion

CORRECT = '''```python
import torch
import torch.distributed as dist


def solution(tensor):
    out = tensor.float()
    dist.all_reduce(out)
    return out.to(tensor.dtype)
```'''


def run_agent(tmp_path, model, steps=3, **overrides):
    harness = HarnessConfig(problem="all_reduce", world=2, device="cpu", allow_nccl=True, trials=2, timed=False)
    overrides.setdefault("budget", Budget(steps=steps))
    config = RunConfig(problem="all_reduce", model=getattr(model, "spec", "test"), harness=harness, **overrides)
    trajectory = Trajectory(tmp_path, info={"config": config.model_dump(mode="json")})
    records = []
    with EvaluationSession(harness) as session:
        agent = Agent(model, get_problem("all_reduce"), config, session.evaluate, trajectory, on_step=records.append)
        status = agent.run()
    return status, agent, records, json.loads((tmp_path / "trajectory.traj.json").read_text())


def test_scripted_model_fixes_its_solution_from_feedback(tmp_path):
    status, agent, records, data = run_agent(tmp_path, make_model("scripted:demo"), steps=2)
    assert [r["status"] for r in records] == ["wrong", "correct"]
    assert status == "LimitsExceeded"
    roles = [m["role"] for m in data["messages"]]
    assert roles == ["system", "user", "assistant", "user", "assistant", "user", "exit"]
    assert data["trajectory_format"] == "mini-swe-agent-1.1"
    assert data["info"]["exit_status"] == "LimitsExceeded" and "SUM" in data["info"]["submission"]
    feedback = data["messages"][3]["content"]
    assert "WRONG" in feedback and "expected" in feedback  # the mismatch went back to the model
    assert data["messages"][3]["extra"]["status"] == "wrong"
    for step in (1, 2):
        report = json.loads((tmp_path / f"steps/00{step}/report.json").read_text())
        assert report["status"] == ["wrong", "correct"][step - 1]
        assert (tmp_path / f"steps/00{step}/solution.py").exists()
    assert (tmp_path / "best/solution.py").read_text() == agent.best.source
    events = [json.loads(line)["event"] for line in (tmp_path / "events.jsonl").read_text().splitlines()]
    assert events[0] == "run_started" and events[-1] == "run_finished" and events.count("evaluated") == 2


def test_single_mode_is_a_one_step_budget(tmp_path):
    status, agent, records, data = run_agent(tmp_path, make_model("scripted:demo"), mode="single")
    assert agent.config.budget.steps == 1 and "1 step" in data["messages"][1]["content"]
    assert status == "LimitsExceeded" and len(records) == 1 and agent.spend.steps == 1
    assert data["messages"][-1]["role"] == "exit"


def test_the_conversation_keeps_thinking_blocks_and_the_event_log_is_closed(tmp_path):
    """The second call sends the first answer back with its signed thinking block (Anthropic
    refuses a tool-use turn without it); the trajectory keeps the thinking; events.jsonl is closed."""
    thinking = {"type": "thinking", "thinking": "Reduce in fp32, then cast back.", "signature": "sig=="}
    answer = [thinking, {"type": "text", "text": CORRECT}]
    harness = HarnessConfig(problem="all_reduce", world=2, device="cpu")
    config = RunConfig(problem="all_reduce", model="anthropic:claude-sonnet-4-5", harness=harness, budget=Budget(steps=2))

    def evaluate(source: str, step: int) -> EvalReport:
        return EvalReport(status="wrong", message="off by one", problem="all_reduce", world=2, device="cpu", dtype="bfloat16", size="small")

    with LocalServer((0, 200, anthropic_message(answer))) as server:
        model = make_model("anthropic:claude-sonnet-4-5", api_key="sk-ant-test", base_url=server.url)
        agent = Agent(model, get_problem("all_reduce"), config, evaluate, Trajectory(tmp_path, info={}))
        agent.run()
    assert [m.role for m in agent.messages] == ["system", "user", "assistant", "user", "assistant", "user", "exit"]
    assert agent.messages[2].thinking_blocks == [thinking] and agent.messages[2].thinking == thinking["thinking"]
    assert server.bodies[1]["messages"][1] == {"role": "assistant", "content": answer}
    saved = json.loads((tmp_path / "trajectory.traj.json").read_text())["messages"][2]
    assert saved["reasoning_content"] == thinking["thinking"] and saved["thinking_blocks"] == [thinking]
    assert not [f.path for f in psutil.Process().open_files() if f.path.endswith("events.jsonl")]
    assert json.loads((tmp_path / "events.jsonl").read_text().splitlines()[-1])["event"] == "run_finished"


def test_target_speedup_ends_the_run(tmp_path):
    harness = HarnessConfig(problem="all_reduce", world=2, device="cpu", allow_nccl=True, trials=2, warmup=2, iterations=10)
    config = RunConfig(problem="all_reduce", model="scripted:demo", harness=harness, budget=Budget(steps=3), target_speedup=0.01)
    trajectory = Trajectory(tmp_path, info={})
    with EvaluationSession(harness) as session:
        agent = Agent(make_model("scripted:demo"), get_problem("all_reduce"), config, session.evaluate, trajectory)
        assert agent.run() == "Submitted"
    assert agent.spend.steps == 2


def test_exhausted_retries_are_a_failed_step_not_a_crash(tmp_path):
    error = {"error": {"message": "overloaded", "type": "server_error"}}
    with LocalServer((0, 503, error), (0, 503, error), (0, 200, openai_completion(CORRECT, model="gpt-5"))) as server:
        policy, _ = fast_policy(max_attempts=2)
        model = make_model("openai:gpt-5", api_key="sk-test", base_url=server.url + "/v1", retry=policy)
        status, _, records, data = run_agent(tmp_path, model, steps=2)
    assert [r["status"] for r in records] == ["provider_error", "correct", "repeated"]  # a failed call is no step
    stats = data["info"]["model_stats"]
    assert stats["input_tokens"] == 2000 and stats["api_calls"] == 2 and stats["failed_calls"] == 1
    assert status == "LimitsExceeded"


def test_a_provider_that_keeps_failing_ends_the_run_cleanly(tmp_path):
    with LocalServer((0, 500, {"error": {"message": "down"}})) as server:
        policy, _ = fast_policy(max_attempts=1)
        model = make_model("openai:gpt-5", api_key="sk-test", base_url=server.url + "/v1", retry=policy)
        status, _, records, data = run_agent(tmp_path, model, steps=10)
    assert status == "ProviderFailed"
    assert [r["status"] for r in records] == ["provider_error"] * 3
    assert data["messages"][-1]["extra"]["exit_status"] == "ProviderFailed"


def test_token_budget_stops_the_run(tmp_path):
    with LocalServer((0, 200, openai_completion("no code here", model="gpt-5"))) as server:
        model = make_model("openai:gpt-5", api_key="sk-test", base_url=server.url + "/v1")
        status, _, records, data = run_agent(tmp_path, model, steps=10, budget=Budget(steps=10, max_tokens=2500))
    assert status == "LimitsExceeded" and "token budget" in data["messages"][-1]["content"]
    assert [r["status"] for r in records] == ["FormatError", "FormatError"]  # 1500 tokens each


def test_extraction_picks_the_block_defining_solution():
    text = "Plan.\n```cuda\n__global__ void k() {}\n```\nthen\n```python\nx = 1\n```\n```python\ndef solution(x):\n    return x\n```\n"
    assert extract_solution(text).startswith("def solution")
    with pytest.raises(FormatError, match="no ```python block"):
        extract_solution("I think we should use NVLink.")
    with pytest.raises(FormatError, match="does not parse"):
        extract_solution("```python\ndef solution(x)\n    return x\n```")
    with pytest.raises(Truncated):
        extract_solution("```python\ndef solution(x):\n    return x", truncated=True)


def test_killed_run_keeps_its_finished_steps(tmp_path):
    """kill -9 in the middle of a run: every finished step is on disk and the trajectory parses."""
    out = tmp_path / "runs"
    proc = subprocess.Popen([sys.executable, "-m", "agent", "run", "all_reduce", "--model", "scripted:demo", "--steps", "3",
                             "--device", "cpu", "--allow-nccl", "--trials", "2", "--out", str(out)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not list(out.glob("*/steps/002/response.md")):
        time.sleep(0.2)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    (folder,) = out.iterdir()
    data = json.loads((folder / "trajectory.traj.json").read_text())
    assert json.loads((folder / "steps/001/report.json").read_text())["status"] == "wrong"
    assert [m.get("extra", {}).get("status") for m in data["messages"] if m["role"] == "user"][1] == "wrong"
    assert data["messages"][2]["role"] == "assistant"


def test_cli_errors_are_one_line(tmp_path, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    result = subprocess.run([sys.executable, "-m", "agent", "run", "all_reduce", "--model", "openai:gpt-5", "--out", str(tmp_path)],
                            capture_output=True, text=True)
    assert result.returncode == 2 and "OPENAI_API_KEY" in result.stderr and "Traceback" not in result.stderr
    result = subprocess.run([sys.executable, "-m", "agent", "run", "nope", "--model", "scripted:demo"], capture_output=True, text=True)
    assert result.returncode == 2 and "no problem named 'nope'" in result.stderr


def test_prompt_command_prints_the_task_without_a_model():
    result = subprocess.run([sys.executable, "-m", "agent", "prompt", "all_reduce", "--world", "8", "--device", "cuda"],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "dist.all_reduce(out" in result.stdout and "8 x NVIDIA" in result.stdout and "SymmetricBuffer" in result.stdout
