"""The Anthropic provider: the real ``anthropic`` SDK, faked only at the HTTP edge."""

from __future__ import annotations

import pytest
import anthropic
from tests.support.providers_http import (LocalServer, Recorder, anthropic_message, clean_env, fast_policy,  # noqa: F401
                            json_reply, raw_reply, sdk_http)

from agent.providers import (FatalProviderError, InvalidModelSpec, Message, MissingApiKey, RetriesExhausted, ToolCall,
                             ToolSpec, make_model)

TASK = "Here is the reference program and the hardware. " * 50
BASH = ToolSpec(name="bash", description="Run a command.",
                parameters={"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]})
EPHEMERAL = {"type": "ephemeral"}
HTTP = sdk_http(anthropic)  # anthropic 2.x takes only httpx2 clients
pytestmark = pytest.mark.filterwarnings("ignore:The model .* is deprecated:DeprecationWarning")


def fake_api(*replies):
    return Recorder(*replies, http=HTTP)


def claude(recorder: Recorder, spec: str = "anthropic:claude-sonnet-4-5", **options):
    policy, sleep = fast_policy(**options.pop("policy", {}))
    options.setdefault("api_key", "sk-ant-test")
    return make_model(spec, http_client=recorder.client(), retry=policy, **options), sleep


def sent_key(request) -> str:
    """The API key as the SDK sent it (``x-api-key``, or a bearer token in newer SDKs)."""
    return request.headers.get("x-api-key") or request.headers.get("authorization", "").removeprefix("Bearer ")


def cache_marks(body: dict) -> list[str]:
    """Where cache_control sits: 'system' or 'messages[i].content[j]'."""
    marks = [f"system[{i}]" for i, block in enumerate(body.get("system", [])) if "cache_control" in block]
    for i, turn in enumerate(body["messages"]):
        marks += [f"messages[{i}].content[{j}]" for j, block in enumerate(turn["content"]) if "cache_control" in block]
    return marks


def test_request_body_system_caching_tools_and_thinking():
    recorder = fake_api(json_reply(anthropic_message()))
    model, _ = claude(recorder, thinking_budget_tokens=8000)
    model.complete([Message(role="system", content="You write CUDA."), Message(role="user", content=TASK)],
                   tools=[BASH])
    request = recorder.requests[0]
    assert str(request.url) == "https://api.anthropic.com/v1/messages"
    assert sent_key(request) == "sk-ant-test" and request.headers["anthropic-version"]
    body = recorder.bodies[0]
    assert body["model"] == "claude-sonnet-4-5"
    assert body["system"] == [{"type": "text", "text": "You write CUDA.", "cache_control": EPHEMERAL}]
    assert body["messages"] == [{"role": "user", "content": [{"type": "text", "text": TASK, "cache_control": EPHEMERAL}]}]
    assert body["tools"] == [{"name": "bash", "description": "Run a command.", "input_schema": BASH.parameters}]
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 8000}
    assert body["max_tokens"] == 8000 + 16384 and "temperature" not in body


def test_multi_turn_tools_thinking_blocks_and_cache_placement():
    thinking = {"type": "thinking", "thinking": "I should list files.", "signature": "sig=="}
    conversation = [
        Message(role="system", content="You write CUDA."),
        Message(role="user", content=TASK),
        Message(role="assistant", content="Looking.", thinking_blocks=[thinking],
                tool_calls=[ToolCall(id="toolu_1", name="bash", arguments={"command": "ls"})]),
        Message(role="tool", tool_call_id="toolu_1", content="reference.py"),
        Message(role="user", content="Steps left: 3"),
        Message(role="assistant", content="Done."),
        Message(role="user", content="Your kernel was correct."),
    ]
    recorder = fake_api(json_reply(anthropic_message()))
    model, _ = claude(recorder, max_output_tokens=2048, temperature=0.5)
    model.complete(conversation, tools=[BASH])
    body = recorder.bodies[0]
    assert body["max_tokens"] == 2048 and body["temperature"] == 0.5
    assert [t["role"] for t in body["messages"]] == ["user", "assistant", "user", "assistant", "user"]
    assert body["messages"][1]["content"] == [
        thinking, {"type": "text", "text": "Looking."},
        {"type": "tool_use", "id": "toolu_1", "name": "bash", "input": {"command": "ls"}}]
    assert body["messages"][2]["content"] == [
        {"type": "tool_result", "tool_use_id": "toolu_1", "content": "reference.py"},
        {"type": "text", "text": "Steps left: 3"}]
    assert cache_marks(body) == ["system[0]", "messages[0].content[0]"]

    recorder = fake_api(json_reply(anthropic_message()))
    model, _ = claude(recorder, cache_conversation=True)
    model.complete(conversation)
    assert cache_marks(recorder.bodies[0]) == ["system[0]", "messages[0].content[0]", "messages[4].content[0]"]

    recorder = fake_api(json_reply(anthropic_message()))
    model, _ = claude(recorder, cache_prompt=False)
    model.complete(conversation)
    assert cache_marks(recorder.bodies[0]) == []


def test_response_thinking_apart_tool_use_usage_and_cost():
    recorder = fake_api(json_reply(anthropic_message(
        content=[{"type": "thinking", "thinking": "Let me think.", "signature": "abc"},
                 {"type": "redacted_thinking", "data": "opaque"},
                 {"type": "text", "text": "I will check."},
                 {"type": "tool_use", "id": "toolu_9", "name": "bash", "input": {"command": "nvidia-smi"}}],
        stop_reason="tool_use",
        usage={"input_tokens": 100, "output_tokens": 50, "cache_read_input_tokens": 2000,
               "cache_creation_input_tokens": 300, "output_tokens_details": {"thinking_tokens": 20}})))
    model, _ = claude(recorder, thinking_budget_tokens=2048)
    response = model.complete([Message(role="user", content="go")])
    assert response.text == "I will check." and response.thinking == "Let me think."
    assert response.finish_reason == "tool_calls"
    assert response.tool_calls == [ToolCall(id="toolu_9", name="bash", arguments={"command": "nvidia-smi"})]
    assert response.thinking_blocks == [{"type": "thinking", "thinking": "Let me think.", "signature": "abc"},
                                        {"type": "redacted_thinking", "data": "opaque"}]
    assert response.usage.model_dump() == {"input_tokens": 2400, "output_tokens": 50, "cached_input_tokens": 2000,
                                           "reasoning_tokens": 20, "cache_write_input_tokens": 300, "reported": True}
    assert response.model == "claude-sonnet-4-5-20250929"
    assert response.cost_usd == pytest.approx((100 * 3.0 + 2000 * 0.30 + 300 * 3.75 + 50 * 15.0) / 1e6)
    echoed = response.to_message()
    assert echoed.thinking_blocks == response.thinking_blocks and echoed.tool_calls == response.tool_calls


@pytest.mark.parametrize("reason,expected", [("end_turn", "stop"), ("max_tokens", "length"), ("refusal", "content_filter"),
                                             ("stop_sequence", "stop"), ("tool_use", "tool_calls")])
def test_stop_reasons(reason, expected):
    model, _ = claude(fake_api(json_reply(anthropic_message(stop_reason=reason))))
    assert model.complete([Message(role="user", content="hi")]).finish_reason == expected


def test_unknown_model_costs_none():
    model, _ = claude(fake_api(json_reply(anthropic_message(model="claude-next-preview"))), spec="anthropic:claude-next-preview")
    assert model.complete([Message(role="user", content="hi")]).cost_usd is None


def test_missing_key_names_the_variable():
    with pytest.raises(MissingApiKey, match="set the environment variable ANTHROPIC_API_KEY"):
        make_model("anthropic:claude-sonnet-4-5")


def test_environment_key_and_base_url(monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-env")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://gateway.test/anthropic")
    recorder = fake_api(json_reply(anthropic_message()))
    make_model("anthropic:claude-sonnet-4-5", http_client=recorder.client()).complete([Message(role="user", content="hi")])
    make_model("anthropic:claude-sonnet-4-5", http_client=recorder.client(), api_key="sk-explicit",
               base_url="http://other.test").complete([Message(role="user", content="hi")])
    assert str(recorder.requests[0].url) == "http://gateway.test/anthropic/v1/messages"
    assert sent_key(recorder.requests[0]) == "sk-ant-env"
    assert str(recorder.requests[1].url) == "http://other.test/v1/messages"
    assert sent_key(recorder.requests[1]) == "sk-explicit"


def test_auth_token_is_an_accepted_credential(monkeypatch):
    monkeypatch.setenv("ANTHROPIC_AUTH_TOKEN", "bearer-token")
    recorder = fake_api(json_reply(anthropic_message()))
    make_model("anthropic:claude-sonnet-4-5", http_client=recorder.client()).complete([Message(role="user", content="hi")])
    assert recorder.requests[0].headers["authorization"] == "Bearer bearer-token"


def test_overloaded_and_rate_limited_are_retried():
    overloaded = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    limited = {"type": "error", "error": {"type": "rate_limit_error", "message": "Too many tokens"}}
    recorder = fake_api(json_reply(overloaded, 529), json_reply(limited, 429, {"retry-after": "12"}),
                        json_reply(anthropic_message()))
    model, sleep = claude(recorder, policy={"backoff_initial_s": 1.0})
    response = model.complete([Message(role="user", content="hi")])
    assert response.attempts == 3 and len(recorder.requests) == 3
    assert 0.5 <= sleep.calls[0] <= 1.0 and sleep.calls[1] == 12.0


def test_exhausted_retries_and_fatal_errors():
    overloaded = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    model, sleep = claude(fake_api(json_reply(overloaded, 529)), policy={"max_attempts": 2})
    with pytest.raises(RetriesExhausted, match="after 2 attempts: HTTP 529.*Overloaded") as caught:
        model.complete([Message(role="user", content="hi")])
    assert caught.value.attempts == 2

    invalid = {"type": "error", "error": {"type": "invalid_request_error", "message": "max_tokens: too large"}}
    recorder = fake_api(json_reply(invalid, 400))
    model, sleep = claude(recorder)
    with pytest.raises(FatalProviderError, match="HTTP 400 .*max_tokens: too large"):
        model.complete([Message(role="user", content="hi")])
    assert len(recorder.requests) == 1 and sleep.calls == []


@pytest.mark.parametrize("reply", [
    json_reply({"type": "message", "content": "not a list"}),
    json_reply(["a", "list"]),
])
def test_malformed_bodies_are_fatal(reply):
    recorder = fake_api(reply)
    model, _ = claude(recorder)
    with pytest.raises(FatalProviderError, match="malformed response from anthropic"):
        model.complete([Message(role="user", content="hi")])
    assert len(recorder.requests) == 1


def test_unparseable_body_is_fatal():
    recorder = Recorder(raw_reply(b"{\"type\": \"mess"), http=HTTP)
    model, _ = claude(recorder)
    with pytest.raises(FatalProviderError, match="malformed response from anthropic .*could not be parsed"):
        model.complete([Message(role="user", content="hi")])


def test_per_attempt_timeout_on_a_slow_server():
    with LocalServer((2.0, 200, anthropic_message()), (0.0, 200, anthropic_message())) as server:
        policy, sleep = fast_policy(attempt_timeout_s=0.3)
        model = make_model("anthropic:claude-sonnet-4-5", api_key="k", base_url=server.url, retry=policy)
        response = model.complete([Message(role="user", content="hi")])
        assert response.attempts == 2 and server.paths == ["/v1/messages"] * 2 and len(sleep.calls) == 1


def test_option_checks():
    with pytest.raises(InvalidModelSpec, match="must exceed thinking_budget_tokens"):
        make_model("anthropic:claude-sonnet-4-5", api_key="k", thinking_budget_tokens=4096, max_output_tokens=4096)
    with pytest.raises(InvalidModelSpec, match="thinking_budget_tokens"):
        make_model("anthropic:claude-sonnet-4-5", api_key="k", thinking_budget_tokens=10)
    with pytest.raises(InvalidModelSpec, match="reasoning_effort"):
        make_model("anthropic:claude-sonnet-4-5", api_key="k", reasoning_effort="high")


def test_raw_thinking_parameter_passes_through():
    recorder = fake_api(json_reply(anthropic_message()))
    model, _ = claude(recorder, spec="anthropic:claude-opus-4-6", thinking={"type": "adaptive"})
    model.complete([Message(role="user", content="hi")])
    assert recorder.bodies[0]["thinking"] == {"type": "adaptive"}
