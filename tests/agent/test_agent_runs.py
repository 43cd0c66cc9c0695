"""The loop as real users run it (issue 14): each finding of the 60-run trial with the real
openai and anthropic SDKs against stand-in servers that misbehave (``tests.support.providers_http``),
and the trajectory as mini-swe-agent's own inspector shows it."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from agent.budget import Budget
from agent.episode import Episode
from agent.providers import Message, ModelResponse, ProviderTimeout, Usage, make_model
from agent.providers.scripted import CannedModel
from agent.run_config import RunConfig
from agent.trajectory import FORMAT, new_run_folder
from sandbox.harness.config import HarnessConfig
from sandbox.report import EvalReport
from tests.support.providers_http import (LocalServer, Recorder, anthropic_message, clean_env, fast_policy,  # noqa: F401
                                  json_reply, openai_completion, openai_response)

CORRECT = "```python\nimport torch.distributed as dist\n\n\ndef solution(tensor):\n    out = tensor.float()\n    dist.all_reduce(out)\n    return out.to(tensor.dtype)\n```"
ROOT = Path(__file__).resolve().parents[2]


class FakeJudge:
    """``evaluate`` without a sandbox: a fixed verdict, and the sources it was given."""

    def __init__(self, status: str = "wrong", error: Exception | None = None):
        self.status, self.error = status, error
        self.sources: list[str] = []

    def __call__(self, source: str, step: int) -> EvalReport:
        self.sources.append(source)
        if self.error is not None:
            raise self.error
        return EvalReport(status=self.status, message=f"{self.status} at step {step}", problem="all_reduce", world=2,
                          device="cpu", dtype="bfloat16", size="small")


def config(model_spec: str = "test", steps: int = 3, **fields) -> RunConfig:
    harness = HarnessConfig(problem="all_reduce", world=2, device="cpu", allow_nccl=True, trials=2, timed=False)
    fields.setdefault("budget", Budget(steps=steps))
    return RunConfig(problem="all_reduce", model=model_spec, harness=harness, **fields)


def run(tmp_path, model, judge=None, **fields):
    """One episode through the public entry point; (result, episode, trajectory data)."""
    episode = Episode(config(getattr(model, "spec", "test"), out=tmp_path / "runs", **fields), model=model,
                      evaluate=judge or FakeJudge())
    result = episode.run()
    return result, episode, json.loads(result.trajectory_path.read_text())


def openai_model(server: LocalServer, spec: str = "openai:gpt-5", **options):
    policy, _ = fast_policy(**options.pop("policy", {}))
    return make_model(spec, api_key="sk-test", base_url=server.url + "/v1", retry=policy, **options)


def canned(*texts: str) -> CannedModel:
    return CannedModel("scripted:test", "test", [ModelResponse(text=t, cost_usd=0.0) for t in texts], "test")


# -- 1, 7, 10, 13: the CLI as a user runs it --------------------------------------------------


def cli(args, env_extra=None, **popen):
    env = {**os.environ, "PYTHONPATH": str(ROOT), **(env_extra or {})}
    return subprocess.Popen([sys.executable, "-m", "agent", *args], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=lambda: os.umask(0o022), **popen)


def wait_for(predicate, timeout=120.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def test_ctrl_c_during_a_model_call_says_so_and_keeps_the_trajectory(tmp_path):
    """Findings 1, 7, 10: events.jsonl is written under the CLI's logging; Ctrl-C prints
    "interrupted" and the trajectory's path; the trajectory records it; files follow the umask."""
    out = tmp_path / "runs"
    with LocalServer((60, 200, openai_completion(CORRECT))) as server:
        proc = cli(["run", "all_reduce", "--model", "openai:gpt-5", "--out", str(out), "--allow-nccl"],
                   {"OPENAI_API_KEY": "sk-test", "OPENAI_BASE_URL": server.url + "/v1"})
        assert wait_for(lambda: server.paths), proc.communicate(timeout=5)
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=60)
    (folder,) = out.iterdir()
    trajectory = folder / "trajectory.traj.json"
    assert proc.returncode == 130, stderr
    assert "interrupted" in stderr and str(trajectory) in stderr.replace("\n", "")
    data = json.loads(trajectory.read_text())
    exit_message = data["messages"][-1]
    assert exit_message["role"] == "exit" and exit_message["extra"]["exit_status"] == "Interrupted"
    assert "KeyboardInterrupt" in exit_message["extra"]["traceback"] and data["info"]["exit_status"] == "Interrupted"
    events = [json.loads(line)["event"] for line in (folder / "events.jsonl").read_text().splitlines()]
    assert events[0] == "run_started" and events[-1] == "run_finished"
    for name in ("trajectory.traj.json", "config.json", "summary.json", "events.jsonl"):
        assert stat.S_IMODE((folder / name).stat().st_mode) == 0o644, name


def test_ctrl_c_in_the_first_moments_leaves_a_trajectory(tmp_path):
    """Finding 13: SIGINT right after the run folder is made (the sandbox still starting)."""
    out = tmp_path / "runs"
    proc = cli(["run", "all_reduce", "--model", "scripted:demo", "--out", str(out), "--allow-nccl"])
    assert wait_for(lambda: list(out.glob("*/config.json"))), proc.communicate(timeout=5)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    (folder,) = out.iterdir()
    data = json.loads((folder / "trajectory.traj.json").read_text())
    assert proc.returncode == 130 and data["trajectory_format"] == FORMAT, stderr
    assert data["info"]["exit_status"] == "Interrupted" and "interrupted" in stderr
    assert data["messages"][-1]["extra"]["exit_status"] == "Interrupted"


# -- 2: lone surrogates, uncaught exceptions ------------------------------------------------------


def test_a_lone_surrogate_in_the_answer_is_no_crash(tmp_path):
    answer = CORRECT.replace("out = tensor.float()", "out = tensor.float()  # done \ud83d")
    judge = FakeJudge("correct")
    with LocalServer((0, 200, openai_completion("Here \ud83d:\n" + answer))) as server:
        result, episode, data = run(tmp_path, openai_model(server), judge, budget=Budget(steps=2))
    assert result.exit_status == "LimitsExceeded" and result.correct
    assert "\ufffd" in judge.sources[0] and "\ufffd" in (result.folder / "steps/001/response.md").read_text()
    assert data["messages"][2]["role"] == "assistant"


def test_an_uncaught_exception_is_recorded_with_its_traceback(tmp_path):
    with pytest.raises(RuntimeError, match="judge broke"):
        run(tmp_path, canned(CORRECT), FakeJudge(error=RuntimeError("judge broke")))
    (folder,) = (tmp_path / "runs").iterdir()
    data = json.loads((folder / "trajectory.traj.json").read_text())
    exit_message = data["messages"][-1]
    assert exit_message["extra"]["exit_status"] == "RuntimeError" and data["info"]["exit_status"] == "RuntimeError"
    assert exit_message["extra"]["exception_str"] == "judge broke" and "Traceback" in exit_message["extra"]["traceback"]
    assert data["messages"][2]["role"] == "assistant"  # the answer before the crash is kept


# -- 3: tool calls and refusals ----------------------------------------------------------------


def test_tool_call_answers_and_refusals_are_kept_and_answered(tmp_path):
    call = {"id": "call_1", "type": "function", "function": {"name": "bash", "arguments": "{\"command\": \"nvidia-smi\"}"}}
    replies = [(0, 200, openai_completion(None, tool_calls=[call], finish_reason="tool_calls")),
               (0, 200, openai_completion(None, refusal="I can't help with that."))]
    with LocalServer(*replies) as server:
        result, episode, data = run(tmp_path, openai_model(server), budget=Budget(steps=2))
    first, second = [m for m in data["messages"] if m["role"] == "assistant"]
    assert first["tool_calls"] == [call] and second["refusal"] == "I can't help with that."
    feedback = [m["content"] for m in data["messages"] if m["role"] == "user"][1:]
    assert "called bash" in feedback[0] and "refusal" in feedback[1] and "I can't help with that." in feedback[1]
    assert "nvidia-smi" in (result.folder / "steps/001/response.md").read_text()
    assert "I can't help" in (result.folder / "steps/002/response.md").read_text()


# -- 4: unknown usage, unknown price ----------------------------------------------------------------


def test_missing_usage_is_an_unknown_cost_and_the_cost_budget_ends_the_run(tmp_path):
    body = openai_completion("no code")
    del body["usage"]
    with LocalServer((0, 200, body)) as server:
        result, episode, data = run(tmp_path, openai_model(server, "openai:gpt-5.1"),
                                    budget=Budget(steps=5, max_run_cost_usd=1.0))
    assert result.exit_status == "LimitsExceeded" and result.steps == 1 and result.cost_usd is None
    assert "did not report the token usage" in result.message
    stats = data["info"]["model_stats"]
    assert stats["cost_known"] is False and stats["instance_cost"] == 0.0 and stats["unknown_usage_calls"] == 1
    assert any("without token usage" in w for w in result.warnings)


def test_an_unknown_price_with_a_cost_budget_warns(tmp_path):
    with LocalServer((0, 200, openai_completion(CORRECT, model="my-finetune"))) as server:
        result, episode, data = run(tmp_path, openai_model(server, "openai:my-finetune"), FakeJudge("correct"),
                                    budget=Budget(steps=1, max_run_cost_usd=1.0))
    assert any("--max-run-cost" in w and "no price" in w for w in result.warnings)
    assert data["info"]["warnings"] == result.warnings and result.cost_usd is None
    assert isinstance(data["info"]["model_stats"]["instance_cost"], float)


# -- 5: a hanging endpoint --------------------------------------------------------------------


def test_the_wall_budget_cuts_a_hanging_model_call(tmp_path):
    with LocalServer((30, 200, openai_completion(CORRECT))) as server:
        started = time.monotonic()
        result, episode, data = run(tmp_path, openai_model(server, policy={"attempt_timeout_s": 600}),
                                    budget=Budget(steps=3, max_run_wall_s=3))
        took = time.monotonic() - started
    assert result.exit_status == "LimitsExceeded" and "wall-time budget" in result.message
    assert len(server.paths) == 1 and result.wall_s < 6 and took < 30


def test_a_hanging_endpoint_is_retried_once_by_default():
    policy, sleep = fast_policy(max_attempts=6)
    assert policy.max_timeout_attempts == 2
    calls = []

    def attempt(timeout_s):
        calls.append(timeout_s)
        raise ProviderTimeout("timed out")

    with pytest.raises(Exception, match="2 of them timed out"):
        policy.call(attempt)
    assert len(calls) == 2


# -- 6: run folders ---------------------------------------------------------------------------------


def test_run_folders_are_made_race_free(tmp_path):
    barrier = threading.Barrier(16)
    made, failed = [], []

    def make():
        barrier.wait()
        try:
            made.append(new_run_folder(tmp_path, "all_reduce", "openai:gpt-5"))
        except Exception as error:  # noqa: BLE001
            failed.append(error)

    threads = [threading.Thread(target=make) for _ in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not failed and len(set(made)) == 16


# -- 8: streaming -----------------------------------------------------------------------------


def test_long_anthropic_calls_stream_with_progress(tmp_path):
    thinking = {"type": "thinking", "thinking": "Reduce in fp32, then cast back.", "signature": "sig=="}
    with LocalServer((0, 200, anthropic_message([thinking, {"type": "text", "text": CORRECT}]))) as server:
        model = make_model("anthropic:claude-sonnet-4-5", api_key="sk-ant-test", base_url=server.url,
                           thinking_budget_tokens=16000, max_output_tokens=64000)
        seen = []
        response = model.complete([Message(role="user", content="go")], progress=seen.append)
    assert server.bodies[0]["stream"] is True and response.streamed
    assert response.thinking == thinking["thinking"] and response.text == CORRECT
    assert response.thinking_blocks == [thinking] and response.usage.cached_input_tokens == 2000
    assert seen and seen[-1]["thinking_chars"] > 0


def test_reasoning_chat_calls_stream_and_keep_their_usage():
    body = openai_completion(CORRECT, reasoning_content="think first")
    recorder = Recorder(json_reply(body))
    policy, _ = fast_policy()
    model = make_model("openai:gpt-5", api_key="sk-test", http_client=recorder.client(), retry=policy, reasoning_effort="high")
    response = model.complete([Message(role="user", content="go")])
    sent = recorder.bodies[0]
    assert sent["stream"] is True and sent["stream_options"] == {"include_usage": True}
    assert response.text == CORRECT and response.thinking == "think first" and response.streamed
    assert response.usage.input_tokens == 1000 and response.usage.reasoning_tokens == 300 and response.cost_usd is not None


# -- the Responses API ------------------------------------------------------------------------------


def test_openai_responses_api_streamed_with_reasoning_summary():
    recorder = Recorder(json_reply(openai_response(CORRECT, reasoning="plan the reduction")))
    policy, _ = fast_policy()
    model = make_model("openai:gpt-5", api_key="sk-test", http_client=recorder.client(), retry=policy, api="responses",
                       reasoning_effort="high", max_output_tokens=9000)
    seen = []
    response = model.complete([Message(role="system", content="You write kernels."), Message(role="user", content="go")],
                              progress=seen.append)
    request = recorder.requests[0]
    sent = recorder.bodies[0]
    assert request.url.path == "/v1/responses" and sent["stream"] is True and sent["store"] is False
    assert sent["instructions"] == "You write kernels." and sent["input"] == [{"role": "user", "content": "go"}]
    assert sent["reasoning"] == {"effort": "high", "summary": "auto"} and sent["max_output_tokens"] == 9000
    assert response.text == CORRECT and response.thinking == "plan the reduction"
    assert response.thinking_blocks[0]["encrypted_content"] == "enc=="
    assert response.usage.cached_input_tokens == 400 and response.usage.reasoning_tokens == 300 and seen


def test_openai_responses_api_tool_calls_refusals_and_the_next_turn():
    call = {"call_id": "call_7", "name": "bash", "arguments": "{\"command\": \"ls\"}"}
    recorder = Recorder(json_reply(openai_response("", function_calls=[call])),
                        json_reply(openai_response("", refusal="No.")))
    policy, _ = fast_policy()
    model = make_model("openai:gpt-5", api_key="sk-test", http_client=recorder.client(), retry=policy, api="responses")
    first = model.complete([Message(role="user", content="go")])
    assert first.finish_reason == "tool_calls" and first.tool_calls[0].arguments == {"command": "ls"}
    second = model.complete([Message(role="user", content="go"), first.to_message(),
                             Message(role="tool", tool_call_id="call_7", content="a.py")])
    assert recorder.bodies[1]["input"][1:] == [
        {"type": "function_call", "call_id": "call_7", "name": "bash", "arguments": "{\"command\": \"ls\"}"},
        {"type": "function_call_output", "call_id": "call_7", "output": "a.py"}]
    assert "stream" not in recorder.bodies[0] and second.refusal == "No." and second.finish_reason == "content_filter"


# -- 9: fatal errors, failed calls ----------------------------------------------------------------


def test_a_refused_key_ends_the_run_at_once_and_failed_calls_are_not_model_calls(tmp_path):
    refused = {"error": {"message": "Incorrect API key provided", "type": "invalid_request_error"}}
    with LocalServer((0, 401, refused)) as server:
        result, episode, data = run(tmp_path, openai_model(server), budget=Budget(steps=5))
    assert result.exit_status == "ProviderFailed" and "API key" in result.message
    assert len(server.paths) == 1 and result.steps == 0
    assert data["info"]["model_stats"]["api_calls"] == 0 and data["info"]["model_stats"]["failed_calls"] == 1


# -- 11: repeated answers ----------------------------------------------------------------------------


def test_a_repeated_answer_is_not_evaluated_again(tmp_path):
    judge = FakeJudge("wrong")
    result, episode, data = run(tmp_path, canned(CORRECT, "Again:\n" + CORRECT, CORRECT), judge)
    assert len(judge.sources) == 1 and result.steps == 3
    feedback = [m for m in data["messages"] if m["role"] == "user"][2:]
    assert all("identical to the one you sent at step 1" in m["content"] for m in feedback)
    assert [m["extra"]["repeats"] for m in feedback] == [1, 1]
    assert [s["status"] for s in data["info"]["steps"]] == ["wrong", "repeated", "repeated"]


# -- 12: prompt defaults, option names -------------------------------------------------------


def test_prompt_defaults_match_run_and_cpu_prompts_carry_no_cuda_examples():
    from typer.testing import CliRunner

    from agent.cli import app

    runner = CliRunner()
    cpu = runner.invoke(app, ["prompt", "all_reduce"])
    assert cpu.exit_code == 0, cpu.output
    assert "## Example:" not in cpu.output and "gloo" in cpu.output.lower() or "cpu" in cpu.output.lower()
    cuda = runner.invoke(app, ["prompt", "all_reduce", "--device", "cuda"])
    assert "## Example:" in cuda.output and len(cpu.output) < len(cuda.output) / 2
    help_text = runner.invoke(app, ["run", "--help"], terminal_width=200).output
    for flag in ("--max-run-tokens", "--max-run-cost", "--max-run-wall", "--max-output-tokens"):
        assert flag in help_text
    assert "--max-tokens " not in help_text and "--max-wall " not in help_text


# -- 13: replay ------------------------------------------------------------------------------------------


def test_replay_past_its_end_stops_clearly_and_another_problem_warns(tmp_path):
    result, episode, _ = run(tmp_path / "first", canned(CORRECT), FakeJudge("correct"), budget=Budget(steps=1))
    recorded = json.loads(result.trajectory_path.read_text())
    recorded["info"]["config"]["problem"] = "reduce_scatter"
    result.trajectory_path.write_text(json.dumps(recorded))
    replay = make_model(f"replay:{result.folder}")
    again, _, data = run(tmp_path / "again", replay, FakeJudge("correct"), budget=Budget(steps=4))
    assert again.exit_status == "ProviderFailed" and "the replay is over" in again.message and again.steps == 1
    assert [s["status"] for s in data["info"]["steps"]] == ["correct", "provider_error"]
    assert any("'reduce_scatter' onto 'all_reduce'" in w for w in again.warnings)


# -- the trajectory in mini-swe-agent's inspector ----------------------------------------------------------------


def test_trajectory_is_mini_swe_agent_1_1(tmp_path):
    thinking = {"type": "thinking", "thinking": "Reduce in fp32.", "signature": "sig=="}
    with LocalServer((0, 200, anthropic_message([thinking, {"type": "text", "text": CORRECT}]))) as server:
        model = make_model("anthropic:claude-sonnet-4-5", api_key="sk-ant-test", base_url=server.url)
        result, episode, data = run(tmp_path, model, FakeJudge("correct"), budget=Budget(steps=1))
    assert result.trajectory_path.name.endswith(".traj.json") and data["trajectory_format"] == "mini-swe-agent-1.1"
    assistant = data["messages"][2]
    assert assistant["reasoning_content"] == "Reduce in fp32." and assistant["extra"]["cost"] > 0
    assert all(isinstance(m["extra"]["timestamp"], float) for m in data["messages"])
    info = data["info"]
    assert info["exit_status"] == "LimitsExceeded" and "def solution" in info["submission"]
    assert isinstance(info["model_stats"]["instance_cost"], float) and info["model_stats"]["api_calls"] == 1


def test_the_mini_swe_agent_inspector_shows_every_step_the_exit_and_the_thinking(tmp_path):
    pytest.importorskip("minisweagent")
    import asyncio

    from minisweagent.run.utilities.inspector import TrajectoryInspector
    from textual.widgets import Static

    model = CannedModel("scripted:test", "test", [
        ModelResponse(text="First try:\n" + CORRECT.replace("float()", "float() * 2"), thinking="maybe double it", cost_usd=0.0),
        ModelResponse(text="Fixed:\n" + CORRECT, thinking="no: sum, then cast", cost_usd=0.0, usage=Usage(input_tokens=5))], "t")
    verdicts = iter(["wrong", "correct"])
    result, _, data = run(tmp_path, model, lambda source, step: FakeJudge(next(verdicts))(source, step), budget=Budget(steps=2))
    found = sorted((tmp_path / "runs").rglob("*.traj.json"))  # what `mini-extra inspector runs/` looks for
    assert found == [result.trajectory_path]

    async def pages() -> list[str]:
        app = TrajectoryInspector(found)
        shown = []
        async with app.run_test() as pilot:
            for _ in range(app.n_steps):
                await pilot.pause()
                shown.append(app.title + "\n" + "\n".join(str(w.render()) for w in app.query(Static)))
                await pilot.press("l")
        return shown

    shown = asyncio.run(pages())
    assert len(shown) == 3  # the task, then one page per answer with its feedback
    assert "Step 1/3" in shown[0] and "SYSTEM" in shown[0] and "USER" in shown[0]
    assert "Step 2/3" in shown[1] and "First try" in shown[1] and "REASONING" in shown[1] and "maybe double it" in shown[1]
    assert "wrong at step 1" in shown[1]
    assert "Fixed" in shown[2] and "no: sum, then cast" in shown[2]
    assert "EXIT" in shown[2] and "LimitsExceeded" in shown[2]


def test_atomic_writes_survive_lone_surrogates_and_follow_the_umask(tmp_path):
    from agent.trajectory import atomic_write

    old = os.umask(0o027)
    try:
        atomic_write(tmp_path / "response.md", "a \ud83d b")
    finally:
        os.umask(old)
    assert (tmp_path / "response.md").read_text() == "a \\ud83d b"
    assert stat.S_IMODE((tmp_path / "response.md").stat().st_mode) == 0o640
