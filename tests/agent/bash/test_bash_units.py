"""Bash mode's small parts, without a sandbox: the output cut, the 1.1 trajectory (read back by
replay: and by mini-swe-agent's inspector), the runner's request checks."""

from __future__ import annotations

import json
import socket
import threading

import pytest

from agent.trajectory import Trajectory
from agent.budget import Budget
from agent.providers import FatalProviderError, Message, ToolCall, TransientError
from agent.providers.replay import read_trajectory
from agent.run_config import RunConfig
from problems import get_problem
from sandbox.harness.config import HarnessConfig
from sandbox.shell.runner import Output, _read_request


@pytest.mark.parametrize("size, limit, dropped", [(500, 1000, False), (5000, 4000, False), (100_000, 1000, True)])
def test_output_is_cut_to_head_and_tail_with_the_count(size, limit, dropped):
    output = Output(limit)
    text = "".join(chr(ord("a") + i % 26) for i in range(size))
    for start in range(0, size, 777):
        output.add(text[start:start + 777].encode())
    assert bool(output.buffer.dropped) == dropped
    result = output.result()
    if size <= limit:
        assert result == {"head": text, "tail": "", "elided_chars": 0}
    else:
        assert result["head"] == text[: limit // 2] and result["tail"] == text[-(limit // 2):]
        assert result["elided_chars"] == size - limit


def conversation() -> list[Message]:
    return [Message(role="system", content="sys"), Message(role="user", content="task"),
            Message(role="assistant", content="look", tool_calls=[ToolCall(id="call_1", name="bash", arguments={"command": "ls"})],
                    thinking="hmm", extra={"actions": [{"command": "ls", "tool_call_id": "call_1"}], "cost_usd": 0.0}),
            Message(role="tool", content="<returncode>0</returncode>", tool_call_id="call_1", extra={"returncode": 0, "raw_output": "a"}),
            Message(role="exit", content="done", extra={"exit_status": "Submitted", "submission": "x"})]


def test_the_trajectory_is_mini_swe_agent_1_1_and_replays(tmp_path):
    trajectory = Trajectory(tmp_path, info={"config": {}})
    trajectory.info.update(exit_status="Submitted", submission="x")
    trajectory.save(conversation())
    data = json.loads((tmp_path / "trajectory.traj.json").read_text())
    assert data["trajectory_format"] == "mini-swe-agent-1.1"
    assistant, tool = data["messages"][2], data["messages"][3]
    assert assistant["tool_calls"] == [{"id": "call_1", "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls"}'}}]
    assert assistant["reasoning_content"] == "hmm" and assistant["extra"]["actions"][0]["command"] == "ls"
    assert tool == {"role": "tool", "content": "<returncode>0</returncode>", "tool_call_id": "call_1",
                    "extra": {"returncode": 0, "raw_output": "a"}}
    replayed, _ = read_trajectory(trajectory.path)
    assert replayed[0].tool_calls == [ToolCall(id="call_1", name="bash", arguments={"command": "ls"})]


def test_mini_swe_agents_inspector_reads_it(tmp_path, monkeypatch):
    monkeypatch.setenv("MSWEA_SILENT_STARTUP", "1")
    monkeypatch.setenv("MSWEA_GLOBAL_CONFIG_DIR", str(tmp_path / "mswea"))
    inspector = pytest.importorskip("minisweagent.run.utilities.inspector")
    from minisweagent.models.utils.content_string import get_content_string

    trajectory = Trajectory(tmp_path, info={})
    trajectory.save(conversation())
    messages = json.loads(trajectory.path.read_text())["messages"]
    steps = inspector._messages_to_steps(messages)
    assert [[m["role"] for m in step] for step in steps if step] == [["system", "user"], ["assistant", "tool", "exit"]]
    assert all(isinstance(get_content_string(m), str) for m in messages)


def request(payload: bytes) -> dict:
    """``payload`` sent as a client would, from another thread: a payload larger than the socket's
    buffer would block a send made before the read."""
    mine, theirs = socket.socketpair()

    def send() -> None:
        try:
            mine.sendall(payload)
            mine.shutdown(socket.SHUT_WR)
        except OSError:
            pass  # the reader refused the request and closed its end

    sender = threading.Thread(target=send, daemon=True)
    with mine, theirs:
        sender.start()
        try:
            return _read_request(theirs)
        finally:
            theirs.shutdown(socket.SHUT_RDWR)
            sender.join(timeout=30)


def test_the_runner_checks_every_request():
    ok = request(json.dumps({"tool": "check", "file": "s.py", "source": "x", "options": {"world": 4, "device": "cpu"}}).encode())
    assert ok == {"tool": "check", "file": "s.py", "source": "x", "options": {"world": 4, "device": "cpu"}}
    for bad in (b"{", json.dumps({"tool": "sh", "file": "s", "source": ""}).encode(),
                json.dumps({"tool": "check", "file": 3, "source": ""}).encode(),
                json.dumps({"tool": "check", "file": "s", "source": "", "options": {"world": True}}).encode(),
                json.dumps({"tool": "check", "file": "s", "source": "", "options": {"cwd": "/"}}).encode(),
                json.dumps({"tool": "check", "file": "s", "source": "x" * 700_000}).encode()):
        with pytest.raises(ValueError):
            request(bad)


class StubShell:
    """A shell that is never reached: these runs end in the model call."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        pass

    def write(self, relative, content):
        pass


class StubCommands(StubShell):
    submission = None
    reports: list = []

    def devices(self):
        return ["cpu"]

    def worlds(self, device):
        return [2]


class FailingModel:
    spec = "stub:failing"

    def __init__(self, error):
        self.error, self.calls = error, 0

    def complete(self, messages, tools=None, *, deadline=None, progress=None):
        self.calls += 1
        raise self.error


@pytest.mark.parametrize("error, calls", [(FatalProviderError("Incorrect API key provided"), 1), (TransientError("overloaded"), 3)])
def test_bash_mode_ends_on_a_refused_key_at_once_and_on_other_failures_after_three(tmp_path, error, calls):
    from agent.bash.agent import BashAgent

    harness = HarnessConfig(problem="all_reduce", world=2, device="cpu", allow_nccl=True)
    config = RunConfig(problem="all_reduce", model="stub:failing", mode="bash", harness=harness, budget=Budget(steps=5))
    model = FailingModel(error)
    agent = BashAgent(model, get_problem("all_reduce"), config, StubShell(), StubCommands(), Trajectory(tmp_path, info={}),
                      judge=lambda source: None)
    assert agent.run() == "ProviderFailed" and model.calls == calls
    assert agent.spend.failed_calls == calls and agent.spend.steps == 0
    info = json.loads((tmp_path / "trajectory.traj.json").read_text())["info"]
    assert info["exit_status"] == "ProviderFailed" and info["model_stats"]["failed_calls"] == calls
    assert [r["status"] for r in info["steps"]] == ["provider_error"] * calls
