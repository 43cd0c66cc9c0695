"""The OpenAI-compatible provider: the real ``openai`` SDK, faked only at the HTTP edge."""

from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta, timezone
from email.utils import format_datetime

import pytest
from tests.support.providers_http import (LocalServer, Recorder, clean_env, closed_port, fast_policy,  # noqa: F401
                            json_reply, openai_completion, raw_reply)

from agent.providers import (FatalProviderError, InvalidModelSpec, Message, MissingApiKey, RateLimited,
                             RetriesExhausted, ToolCall, ToolSpec, TransientError, make_model)

BASH = ToolSpec(name="bash", description="Run a command.",
                parameters={"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]})
CONVERSATION = [
    Message(role="system", content="You write CUDA."),
    Message(role="user", content="Make all_reduce fast."),
    Message(role="assistant", content="", tool_calls=[ToolCall(id="call_1", name="bash", arguments={"command": "ls"})]),
    Message(role="tool", tool_call_id="call_1", content="reference.py"),
]


def openai_model(recorder: Recorder, spec: str = "openai:gpt-5", **options):
    policy, sleep = fast_policy(**options.pop("policy", {}))
    options.setdefault("api_key", "sk-test")
    model = make_model(spec, http_client=recorder.client(), retry=policy, **options)
    return model, sleep


def test_request_body_and_parsed_response():
    recorder = Recorder(json_reply(openai_completion(
        text="", finish_reason="tool_calls",
        tool_calls=[{"id": "call_2", "type": "function", "function": {"name": "bash", "arguments": "{\"command\": \"nvcc --version\"}"}}])))
    model, sleep = openai_model(recorder, reasoning_effort="high", max_output_tokens=4096)
    response = model.complete(CONVERSATION, tools=[BASH])

    request = recorder.requests[0]
    assert str(request.url) == "https://api.openai.com/v1/chat/completions"
    assert request.headers["authorization"] == "Bearer sk-test"
    body = recorder.bodies[0]
    assert body["model"] == "gpt-5" and body["reasoning_effort"] == "high"
    assert body["max_completion_tokens"] == 4096 and "max_tokens" not in body and "temperature" not in body
    assert body["messages"] == [
        {"role": "system", "content": "You write CUDA."},
        {"role": "user", "content": "Make all_reduce fast."},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "bash", "arguments": "{\"command\": \"ls\"}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "reference.py"},
    ]
    assert body["tools"] == [{"type": "function", "function": {"name": "bash", "description": "Run a command.",
                                                               "parameters": BASH.parameters}}]

    assert response.finish_reason == "tool_calls" and response.text == ""
    assert response.tool_calls == [ToolCall(id="call_2", name="bash", arguments={"command": "nvcc --version"})]
    assert response.model == "gpt-5-2025-08-07" and response.attempts == 1 and sleep.calls == []
    assert response.usage.model_dump() == {"input_tokens": 1000, "output_tokens": 500, "cached_input_tokens": 400,
                                           "reasoning_tokens": 300, "cache_write_input_tokens": 0, "reported": True}
    assert response.cost_usd == pytest.approx((600 * 1.25 + 400 * 0.125 + 500 * 10.0) / 1e6)
    assert response.latency_s >= 0


@pytest.mark.parametrize("reason,expected", [("stop", "stop"), ("length", "length"),
                                             ("content_filter", "content_filter"), ("tool_calls", "tool_calls")])
def test_finish_reasons(reason, expected):
    model, _ = openai_model(Recorder(json_reply(openai_completion(finish_reason=reason))))
    assert model.complete([Message(role="user", content="hi")]).finish_reason == expected


def test_unknown_model_has_no_cost_and_reasoning_text_kept_apart():
    recorder = Recorder(json_reply(openai_completion(text="answer", model="my-finetune", reasoning_content="hmm")))
    model, _ = openai_model(recorder, spec="vllm:my-finetune", temperature=0.2, extra_body={"top_k": 20})
    response = model.complete([Message(role="user", content="hi")])
    assert response.cost_usd is None and response.text == "answer" and response.thinking == "hmm"
    body = recorder.bodies[0]
    assert body["temperature"] == 0.2 and body["top_k"] == 20


def test_malformed_tool_arguments_are_kept_raw():
    recorder = Recorder(json_reply(openai_completion(tool_calls=[
        {"id": "c", "type": "function", "function": {"name": "bash", "arguments": "{\"command\": "}}])))
    model, _ = openai_model(recorder)
    call = model.complete([Message(role="user", content="hi")]).tool_calls[0]
    assert call.arguments == {} and call.raw_arguments == "{\"command\": "


@pytest.mark.parametrize("provider,url,key_env", [
    ("together", "https://api.together.xyz/v1/chat/completions", "TOGETHER_API_KEY"),
    ("openrouter", "https://openrouter.ai/api/v1/chat/completions", "OPENROUTER_API_KEY"),
    ("deepseek", "https://api.deepseek.com/chat/completions", "DEEPSEEK_API_KEY"),
    ("gemini", "https://generativelanguage.googleapis.com/v1beta/openai/chat/completions", "GEMINI_API_KEY"),
])
def test_compatible_presets(monkeypatch, provider, url, key_env):
    monkeypatch.setenv(key_env, "preset-key")
    monkeypatch.setenv("OPENAI_API_KEY", "must-not-be-used")
    recorder = Recorder(json_reply(openai_completion()))
    model = make_model(f"{provider}:some/model", http_client=recorder.client(), retry=fast_policy()[0],
                       max_output_tokens=100)
    model.complete([Message(role="user", content="hi")])
    request = recorder.requests[0]
    assert str(request.url) == url and request.headers["authorization"] == "Bearer preset-key"
    assert recorder.bodies[0]["max_tokens"] == 100 and recorder.bodies[0]["model"] == "some/model"


@pytest.mark.parametrize("provider,port", [("vllm", 8000), ("sglang", 30000)])
def test_local_servers_need_no_key(provider, port):
    recorder = Recorder(json_reply(openai_completion()))
    model = make_model(f"{provider}:Qwen/Qwen3-8B", http_client=recorder.client(), retry=fast_policy()[0])
    model.complete([Message(role="user", content="hi")])
    assert str(recorder.requests[0].url) == f"http://localhost:{port}/v1/chat/completions"


@pytest.mark.parametrize("provider,variable", [("openai", "OPENAI_API_KEY"), ("together", "TOGETHER_API_KEY"),
                                               ("deepseek", "DEEPSEEK_API_KEY"), ("gemini", "GEMINI_API_KEY"),
                                               ("openrouter", "OPENROUTER_API_KEY")])
def test_missing_key_names_the_variable(provider, variable):
    with pytest.raises(MissingApiKey, match=f"set the environment variable {variable}") as caught:
        make_model(f"{provider}:m")
    assert caught.value.env_var == variable


def test_openai_environment_as_sdk_users_expect(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://proxy.test/openai/v1")
    recorder = Recorder(json_reply(openai_completion()))
    make_model("openai:gpt-5", http_client=recorder.client()).complete([Message(role="user", content="hi")])
    make_model("openai:gpt-5", http_client=recorder.client(), api_key="sk-explicit",
               base_url="http://other.test/v1").complete([Message(role="user", content="hi")])
    assert str(recorder.requests[0].url) == "http://proxy.test/openai/v1/chat/completions"
    assert recorder.requests[0].headers["authorization"] == "Bearer sk-env"
    assert str(recorder.requests[1].url) == "http://other.test/v1/chat/completions"
    assert recorder.requests[1].headers["authorization"] == "Bearer sk-explicit"


def test_rate_limit_honours_retry_after_then_succeeds():
    recorder = Recorder(json_reply({"error": {"message": "Rate limit reached", "type": "requests"}}, 429,
                                   {"retry-after": "7"}),
                        json_reply({"error": {"message": "Rate limit reached"}}, 429, {"retry-after-ms": "1500"}),
                        json_reply(openai_completion(text="finally")))
    model, sleep = openai_model(recorder)
    response = model.complete([Message(role="user", content="hi")])
    assert response.text == "finally" and response.attempts == 3
    assert sleep.calls == [7.0, 1.5]
    assert len(recorder.requests) == 3


def test_rate_limit_retry_after_as_http_date():
    when = format_datetime(datetime.now(timezone.utc) + timedelta(seconds=30), usegmt=True)
    recorder = Recorder(json_reply({"error": {"message": "slow down"}}, 429, {"retry-after": when}),
                        json_reply(openai_completion()))
    model, sleep = openai_model(recorder)
    assert model.complete([Message(role="user", content="hi")]).attempts == 2
    assert 28.0 <= sleep.calls[0] <= 30.0


def test_server_errors_are_retried_with_backoff():
    recorder = Recorder(json_reply({"error": {"message": "internal"}}, 500),
                        json_reply({"error": {"message": "bad gateway"}}, 502),
                        json_reply(openai_completion()))
    model, sleep = openai_model(recorder, policy={"backoff_initial_s": 2.0})
    assert model.complete([Message(role="user", content="hi")]).attempts == 3
    assert 1.0 <= sleep.calls[0] <= 2.0 and 2.0 <= sleep.calls[1] <= 4.0


def test_exhausted_retries_report_attempts_and_last_error():
    recorder = Recorder(json_reply({"error": {"message": "overloaded"}}, 503))
    model, sleep = openai_model(recorder, policy={"max_attempts": 3})
    with pytest.raises(RetriesExhausted) as caught:
        model.complete([Message(role="user", content="hi")])
    assert caught.value.attempts == 3 and len(recorder.requests) == 3 and len(sleep.calls) == 2
    assert isinstance(caught.value.last_error, TransientError) and caught.value.last_error.status_code == 503
    assert "after 3 attempts" in str(caught.value) and "overloaded" in str(caught.value)


@pytest.mark.parametrize("status,hint", [(400, "rejected"), (401, "check it"), (403, "may not use"),
                                         (404, "check the model name")])
def test_client_errors_are_fatal_at_once(status, hint):
    recorder = Recorder(json_reply({"error": {"message": f"nope {status}"}}, status))
    model, sleep = openai_model(recorder)
    with pytest.raises(FatalProviderError, match=f"HTTP {status} from openai .*nope {status}.*{hint}"):
        model.complete([Message(role="user", content="hi")])
    assert len(recorder.requests) == 1 and sleep.calls == []


@pytest.mark.parametrize("reply", [
    raw_reply(b"{\"id\": \"x\", \"choices\": ["),
    json_reply({"unexpected": True}),
    json_reply({"choices": []}),
    raw_reply(b"<html>gateway</html>", content_type="text/html"),
])
def test_malformed_bodies_are_fatal_with_a_clear_message(reply):
    recorder = Recorder(reply)
    model, sleep = openai_model(recorder)
    with pytest.raises(FatalProviderError, match="malformed response from openai"):
        model.complete([Message(role="user", content="hi")])
    assert len(recorder.requests) == 1


def test_error_inside_a_200_body_is_classified():
    recorder = Recorder(json_reply({"error": {"message": "upstream rate limit", "code": 429}}),
                        json_reply(openai_completion(text="ok")))
    model, sleep = openai_model(recorder, spec="openrouter:deepseek/deepseek-chat", api_key="or-key")
    assert model.complete([Message(role="user", content="hi")]).text == "ok"
    assert len(sleep.calls) == 1


def test_per_attempt_timeout_on_a_slow_server_then_success():
    with LocalServer((2.0, 200, openai_completion(text="late")), (0.0, 200, openai_completion(text="fast"))) as server:
        policy, sleep = fast_policy(attempt_timeout_s=0.3)
        model = make_model("openai:gpt-5", api_key="k", base_url=f"{server.url}/v1", retry=policy)
        started = time.monotonic()
        response = model.complete([Message(role="user", content="hi")])
        assert response.text == "fast" and response.attempts == 2
        assert time.monotonic() - started < 1.5
        assert server.paths == ["/v1/chat/completions"] * 2 and len(sleep.calls) == 1


def test_timeouts_every_time_exhaust_the_retries():
    with LocalServer((1.0, 200, openai_completion())) as server:
        policy, sleep = fast_policy(attempt_timeout_s=0.2, max_attempts=2)
        model = make_model("openai:gpt-5", api_key="k", base_url=f"{server.url}/v1", retry=policy)
        with pytest.raises(RetriesExhausted, match="timed out after 0.2s") as caught:
            model.complete([Message(role="user", content="hi")])
        assert caught.value.attempts == 2


def test_connection_refused_is_transient():
    policy, sleep = fast_policy(max_attempts=2)
    model = make_model("vllm:m", base_url=f"http://127.0.0.1:{closed_port()}/v1", retry=policy)
    with pytest.raises(RetriesExhausted, match="could not reach vllm") as caught:
        model.complete([Message(role="user", content="hi")])
    assert isinstance(caught.value.last_error, TransientError) and len(sleep.calls) == 1


def test_concurrency_cap_holds_for_many_threads():
    active, peak, lock = [0], [0], threading.Lock()

    def slow(request):
        with lock:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
        time.sleep(0.03)
        with lock:
            active[0] -= 1
        return json_reply(openai_completion())

    recorder = Recorder(slow)
    model, _ = openai_model(recorder, base_url="http://capped.test/v1", max_concurrency=2)
    threads = [threading.Thread(target=model.complete, args=([Message(role="user", content="hi")],))
               for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(recorder.requests) == 6 and peak[0] == 2


def test_bad_option_values_are_invalid_specs():
    with pytest.raises(InvalidModelSpec, match="max_output_tokens"):
        make_model("openai:gpt-5", api_key="k", max_output_tokens=0)
    with pytest.raises(InvalidModelSpec, match="max_tokens_param"):
        make_model("openai:gpt-5", api_key="k", max_tokens_param="tokens")


def test_rate_limited_is_a_provider_error_with_the_wait():
    recorder = Recorder(json_reply({"error": {"message": "slow"}}, 429, {"retry-after": "3"}))
    model, _ = openai_model(recorder, policy={"max_attempts": 1})
    with pytest.raises(RetriesExhausted) as caught:
        model.complete([Message(role="user", content="hi")])
    assert isinstance(caught.value.last_error, RateLimited) and caught.value.last_error.retry_after_s == 3.0
