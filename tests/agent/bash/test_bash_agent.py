"""Bash mode end to end on CPU: the model at a shell in the sandbox (the real jail), kloop's
commands through the real harness, the submission judged by the full harness; models scripted
or the real OpenAI and Anthropic SDKs against local stand-in servers (tool calls and fenced
bash blocks); the trajectory in mini-swe-agent's 1.1 format."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from agent.bash.actions import parse_actions
from agent.bash.config import BashSettings
from agent.bash.episode import run_episode
from agent.trajectory import Trajectory
from agent.budget import Budget
from agent.control import FormatError
from agent.providers import ModelResponse, ToolCall, make_model
from agent.run_config import RunConfig
from problems import get_problem
from sandbox.harness.config import HarnessConfig
from tests.support.providers_http import LocalServer, anthropic_message, clean_env, fast_policy, openai_completion  # noqa: F401

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the agent's shell runs in the jail: run as root (or with user namespaces)")

SOLUTION = """import torch
import torch.distributed as dist


def solution(tensor):
    out = tensor.float()
    dist.all_reduce(out)
    return out.to(tensor.dtype)
"""
WRITE_AND_SUBMIT = f"cat > solution.py <<'EOF'\n{SOLUTION}EOF\ncheck solution.py && submit solution.py"


def episode(tmp_path, model, steps=6, **bash):
    harness = HarnessConfig(problem="all_reduce", world=2, device="cpu", allow_nccl=True, trials=2)
    config = RunConfig(problem="all_reduce", model=model.spec, mode="bash", harness=harness, budget=Budget(steps=steps),
                       bash=BashSettings(**bash))
    trajectory = Trajectory(tmp_path, info={"config": config.model_dump(mode="json")})
    records = []
    agent = run_episode(model, get_problem("all_reduce"), config, trajectory, on_step=records.append)
    return agent, records, json.loads(trajectory.path.read_text())


def test_the_cli_runs_the_scripted_bash_demo_end_to_end(tmp_path):
    """CI's bash episode: `kloop run all_reduce --mode bash --model scripted:bash-demo --device cpu --allow-nccl`."""
    done = subprocess.run([sys.executable, "-m", "agent", "run", "all_reduce", "--mode", "bash", "--model", "scripted:bash-demo",
                           "--device", "cpu", "--allow-nccl", "--out", str(tmp_path)], capture_output=True, text=True, timeout=900,
                          env={**os.environ, "COLUMNS": "200"})
    print(done.stdout, done.stderr)
    assert done.returncode == 0, done.stderr
    assert "Submitted" in done.stdout and "CORRECT" in done.stdout
    folder = next(tmp_path.iterdir())
    data = json.loads((folder / "trajectory.traj.json").read_text())
    assert data["trajectory_format"] == "mini-swe-agent-1.1"
    assert data["info"]["exit_status"] == "Submitted" and "ReduceOp.SUM" in data["info"]["submission"]
    assert data["info"]["verdict"]["status"] == "correct"
    messages = data["messages"]
    assert [m["role"] for m in messages] == ["system", "user"] + ["assistant", "tool"] * 6 + ["exit"]
    commands = [m["extra"]["actions"][0]["command"] for m in messages if m["role"] == "assistant"]
    assert commands[2] == "check solution.py" and commands[-1] == "submit solution.py"
    outputs = [m["content"] for m in messages if m["role"] == "tool"]
    assert "check solution.py: WRONG" in outputs[2] and "<returncode>1</returncode>" in outputs[2]
    assert "check solution.py: CORRECT" in outputs[3] and "bench solution.py: CORRECT" in outputs[4]
    assert "Speedup over the reference" in outputs[4] and "Submitted solution.py" in outputs[5]
    for assistant, tool in zip(messages[2::2], messages[3::2]):
        assert tool["tool_call_id"] == assistant["tool_calls"][0]["id"] == assistant["extra"]["actions"][0]["tool_call_id"]
    assert json.loads((folder / "final" / "report.json").read_text())["status"] == "correct"
    assert (folder / "final" / "solution.py").read_text().count("ReduceOp.SUM") == 1
    summary = json.loads((folder / "summary.json").read_text())
    assert [c["status"] for c in summary["commands"]] == ["wrong", "correct", "correct"]


def test_openai_tool_calls_through_the_real_sdk(tmp_path):
    """Tool calls with the real openai SDK against a local server: the tool is offered, each call's
    output goes back as its tool result, long outputs are cut before they reach the provider."""
    calls = [
        [{"id": "call_a", "type": "function", "function": {"name": "bash", "arguments": json.dumps(
            {"command": "python -c \"print('x' * 300000)\""})}}],
        [{"id": "call_b", "type": "function", "function": {"name": "bash", "arguments": "{not json"}}],
        [{"id": "call_c", "type": "function", "function": {"name": "bash", "arguments": json.dumps({"command": WRITE_AND_SUBMIT})}}],
    ]
    replies = [(0, 200, openai_completion(text="", finish_reason="tool_calls", tool_calls=c)) for c in calls]
    with LocalServer(*replies) as server:
        policy, _ = fast_policy()
        model = make_model("openai:gpt-5", api_key="sk-test", base_url=server.url + "/v1", retry=policy)
        agent, records, data = episode(tmp_path, model, output_limit_chars=1000)
        bodies = server.bodies
    assert agent.exit_status == "Submitted" and agent.verdict.status == "correct"
    assert all(body["tools"][0]["function"]["name"] == "bash" for body in bodies)
    second = bodies[1]["messages"]
    assert second[-2]["tool_calls"][0]["id"] == "call_a" and second[-1]["role"] == "tool" and second[-1]["tool_call_id"] == "call_a"
    assert "299001 characters elided" in second[-1]["content"]  # 300,000 x and a newline, 1,000 of them shown
    assert len(second[-1]["content"]) < 2000 and "x" * 1001 not in json.dumps(bodies[1])  # never sent whole
    third = bodies[2]["messages"]
    assert third[-1]["tool_call_id"] == "call_b" and "command" in third[-1]["content"]
    assert [r["status"] for r in records] == ["rc=0", "FormatError", "correct"]
    assert data["messages"][-1]["role"] == "exit" and data["info"]["submission"] == SOLUTION


def test_anthropic_tool_use_through_the_real_sdk(tmp_path):
    blocks = [
        [{"type": "text", "text": "Looking around."}, {"type": "tool_use", "id": "toolu_1", "name": "bash", "input": {"command": "ls"}}],
        [{"type": "tool_use", "id": "toolu_2", "name": "bash", "input": {"command": WRITE_AND_SUBMIT}}],
    ]
    replies = [(0, 200, anthropic_message(content=b, stop_reason="tool_use")) for b in blocks]
    with LocalServer(*replies) as server:
        policy, _ = fast_policy()
        model = make_model("anthropic:claude-sonnet-4-5", api_key="sk-ant-test", base_url=server.url, retry=policy)
        agent, records, data = episode(tmp_path, model)
        bodies = server.bodies
    assert agent.exit_status == "Submitted" and agent.verdict.correct
    assert bodies[0]["tools"][0]["name"] == "bash" and "input_schema" in bodies[0]["tools"][0]
    last = bodies[1]["messages"][-1]
    assert last["role"] == "user" and last["content"][0]["type"] == "tool_result" and last["content"][0]["tool_use_id"] == "toolu_1"
    assert "reference.py" in last["content"][0]["content"] and "TASK.md" in last["content"][0]["content"]


def test_fenced_bash_blocks_for_models_without_tools(tmp_path):
    """actions=text: no tool offered; one ```bash block per answer; two blocks are a format error."""
    texts = ["I'll list the folder.\n\n```bash\nls\n```", "Two at once:\n```bash\nls\n```\n```bash\npwd\n```",
             f"Now the solution.\n\n```bash\n{WRITE_AND_SUBMIT}\n```"]
    replies = [(0, 200, openai_completion(text=t)) for t in texts]
    with LocalServer(*replies) as server:
        policy, _ = fast_policy()
        model = make_model("vllm:qwen", base_url=server.url + "/v1", retry=policy)
        agent, records, data = episode(tmp_path, model, actions="text")
        bodies = server.bodies
    assert agent.exit_status == "Submitted" and agent.verdict.correct
    assert all("tools" not in body for body in bodies)
    assert "exactly one ```bash block" in bodies[0]["messages"][0]["content"]
    assert bodies[1]["messages"][-1]["role"] == "user" and "<returncode>0</returncode>" in bodies[1]["messages"][-1]["content"]
    assert "exactly one" in bodies[2]["messages"][-1]["content"]
    assert [r["status"] for r in records] == ["rc=0", "FormatError", "correct"]


def test_no_submission_means_no_verdict(tmp_path):
    model = make_model("scripted:bash-demo")
    agent, records, data = episode(tmp_path, model, steps=2)
    assert agent.exit_status == "LimitsExceeded" and agent.verdict is None
    assert data["info"]["submission"] == "" and "nothing was submitted" in data["messages"][-1]["content"]


def test_parse_actions():
    tool = ModelResponse(tool_calls=[ToolCall(id="1", name="bash", arguments={"command": "ls"}),
                                     ToolCall(id="2", name="bash", arguments={"command": "pwd"})])
    assert [(a.command, a.tool_call_id) for a in parse_actions(tool, tools=True)] == [("ls", "1"), ("pwd", "2")]
    assert parse_actions(ModelResponse(text="ok\n```bash\nls -la\n```\n"), tools=False)[0].command == "ls -la"
    assert parse_actions(ModelResponse(text="```sh\necho hi\n```"), tools=True)[0].tool_call_id is None
    for bad in (ModelResponse(text="no block"), ModelResponse(text="```python\nx=1\n```"),
                ModelResponse(text="```bash\na\n```\n```bash\nb\n```"),
                ModelResponse(tool_calls=[ToolCall(id="1", name="python", arguments={"command": "ls"})]),
                ModelResponse(tool_calls=[ToolCall(id="1", name="bash", arguments={}, raw_arguments="{bad")])):
        with pytest.raises(FormatError):
            parse_actions(bad, tools=True)
    with pytest.raises(FormatError, match="cut off"):
        parse_actions(ModelResponse(text="```bash\nls", finish_reason="length"), tools=False)


def test_check_options_are_limited_to_what_the_sandbox_has():
    from agent.bash.commands import KloopCommands
    from agent.errors import UserError

    harness = HarnessConfig(problem="all_reduce", world=2, device="cpu", allow_nccl=True)
    commands = KloopCommands(None, get_problem("all_reduce"), harness, BashSettings())
    config = commands.config_for("check", {"world": 4})
    assert (config.world, config.device, config.trials, config.timed, config.seed) == (4, "cpu", 2, False, 1000)
    assert commands.config_for("bench", {}).timed is True
    for tool, options, message in [("check", {"device": "cuda"}, "not available"), ("check", {"world": 3}, "world 3"),
                                   ("profile", {}, "GPUs only"), ("bench", {"device": "emulate"}, "not available")]:
        with pytest.raises(UserError, match=message):
            commands.config_for(tool, options)
    gpu = KloopCommands(None, get_problem("all_reduce"), harness.model_copy(update={"device": "cuda", "world": 2}), BashSettings())
    assert gpu.devices() == ["cuda", "emulate", "cpu"] and gpu.worlds("cuda") == [1, 2] and 8 in gpu.worlds("emulate")
    with pytest.raises(UserError, match="never timed"):
        gpu.config_for("bench", {"device": "emulate"})
    assert gpu.config_for("profile", {"world": 1}).is_profiled()
