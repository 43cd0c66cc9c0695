"""The provider protocol, the factory, prices, the retry policy, scripted and replay models."""

from __future__ import annotations

import json
import random
import threading
import time
from datetime import datetime, timedelta, timezone
from email.utils import format_datetime

import pytest
from tests.support.providers_http import clean_env, fast_policy  # noqa: F401  (autouse fixture)

from agent.providers import (FatalProviderError, InvalidModelSpec, Message, Model, ModelResponse, RateLimited,
                             RetriesExhausted, ScriptExhausted, ToolCall, TransientError, Usage, make_model)
from agent.providers.prices import PriceTableError, load_prices
from agent.providers.retry import RetryPolicy, concurrency_limiter, error_for_status, parse_retry_after
from agent.providers.scripted import load_script

# -- factory ---------------------------------------------------------------------------------


@pytest.mark.parametrize("spec", ["gpt-5", "nosuch:model", "openai:", ":gpt-5"])
def test_bad_spec_names_the_providers(spec):
    with pytest.raises(InvalidModelSpec, match="PROVIDER:MODEL.*openai, together, vllm"):
        make_model(spec)


def test_unknown_option_is_a_clear_error():
    with pytest.raises(InvalidModelSpec, match="bad options for openai:gpt-5: reasoning_efort"):
        make_model("openai:gpt-5", api_key="k", reasoning_efort="high")


def test_offline_models_satisfy_the_protocol():
    model = make_model("scripted:example", max_output_tokens=100)
    assert isinstance(model, Model)
    assert (model.spec, model.name) == ("scripted:example", "example")


# -- prices ----------------------------------------------------------------------------------


def test_cost_formula_uncached_cached_output():
    table = load_prices()
    usage = Usage(input_tokens=1_000_000, cached_input_tokens=400_000, output_tokens=100_000, reasoning_tokens=60_000)
    # gpt-5: 1.25 in, 0.125 cached, 10 out (reasoning is part of output)
    assert table.cost_usd(usage, "openai", "gpt-5") == pytest.approx(0.6 * 1.25 + 0.4 * 0.125 + 0.1 * 10)


def test_cost_of_anthropic_cache_writes_and_dated_ids():
    table = load_prices()
    usage = Usage(input_tokens=1_000_000, cached_input_tokens=500_000, cache_write_input_tokens=200_000,
                  output_tokens=0)
    cost = table.cost_usd(usage, "anthropic", "claude-sonnet-4-5-20250929")
    assert cost == pytest.approx(0.3 * 3.0 + 0.5 * 0.30 + 0.2 * 3.75)


def test_unknown_model_costs_none_not_an_error():
    assert load_prices().cost_usd(Usage(input_tokens=5), "vllm", "my-finetune", None) is None


def test_user_price_file_overrides_and_extends(tmp_path, monkeypatch):
    override = tmp_path / "prices.yaml"
    override.write_text("models:\n"
                        "  gpt-5: {input_usd_per_mtok: 2.0, output_usd_per_mtok: 20.0}\n"
                        "  'vllm:Qwen/Qwen3-8B': {input_usd_per_mtok: 0.0, output_usd_per_mtok: 0.0}\n")
    monkeypatch.setenv("KLOOP_PRICES", str(override))
    table = load_prices()
    usage = Usage(input_tokens=1_000_000, cached_input_tokens=1_000_000, output_tokens=1_000_000)
    assert table.cost_usd(usage, "openai", "gpt-5") == pytest.approx(2.0 + 20.0)  # no cached rate: input rate
    assert table.cost_usd(usage, "vllm", "Qwen/Qwen3-8B") == 0.0
    assert table.cost_usd(usage, "together", "Qwen/Qwen3-8B") is None  # qualified by provider
    assert table.lookup("anthropic", "claude-haiku-4-5") is not None  # shipped entries remain


def test_default_user_price_file_in_config_dir(tmp_path, monkeypatch):
    folder = tmp_path / "config" / "kernel-loop"
    folder.mkdir(parents=True)
    (folder / "prices.yaml").write_text("models:\n  my-model: {input_usd_per_mtok: 1, output_usd_per_mtok: 1}\n")
    assert load_prices().lookup("openai", "my-model") is not None


def test_bad_price_files_say_which(tmp_path, monkeypatch):
    monkeypatch.setenv("KLOOP_PRICES", str(tmp_path / "missing.yaml"))
    with pytest.raises(PriceTableError, match="KLOOP_PRICES=.*missing.yaml names no file"):
        load_prices()
    bad = tmp_path / "bad.yaml"
    bad.write_text("models:\n  gpt-5: {input: 1}\n")
    monkeypatch.setenv("KLOOP_PRICES", str(bad))
    with pytest.raises(PriceTableError, match="bad.yaml is not a valid price table"):
        load_prices()


# -- retry policy ----------------------------------------------------------------------------


def test_retry_after_forms():
    now = datetime(2025, 1, 1, tzinfo=timezone.utc)
    assert parse_retry_after({"retry-after": "7"}) == 7.0
    assert parse_retry_after({"Retry-After": "1.5"}) == 1.5
    assert parse_retry_after({"retry-after-ms": "250", "retry-after": "9"}) == 0.25
    date = format_datetime(now + timedelta(seconds=42), usegmt=True)
    assert parse_retry_after({"retry-after": date}, now=now) == pytest.approx(42.0)
    assert parse_retry_after({"retry-after": format_datetime(now - timedelta(seconds=5), usegmt=True)}, now=now) == 0.0
    assert parse_retry_after({"retry-after": "soon"}) is None
    assert parse_retry_after({}) is None


@pytest.mark.parametrize("status,kind", [(429, RateLimited), (500, TransientError), (502, TransientError),
                                         (503, TransientError), (529, TransientError), (408, TransientError),
                                         (400, FatalProviderError), (401, FatalProviderError),
                                         (403, FatalProviderError), (404, FatalProviderError)])
def test_status_classification(status, kind):
    error = error_for_status(status, "detail", {"retry-after": "3"}, "somewhere")
    assert type(error) is kind
    assert "detail" in str(error) and "somewhere" in str(error)
    if kind is not FatalProviderError:
        assert error.retry_after_s == 3.0


def test_backoff_is_exponential_with_jitter_and_capped():
    policy = RetryPolicy(backoff_initial_s=1.0, backoff_max_s=10.0, rng=random.Random(0))
    for attempt, base in [(1, 1.0), (2, 2.0), (3, 4.0), (4, 8.0), (5, 10.0), (9, 10.0)]:
        waits = {policy.backoff_s(attempt) for _ in range(20)}
        assert all(base / 2 <= w <= base for w in waits)
        assert len(waits) > 1  # jitter


def test_policy_retries_transient_then_succeeds():
    policy, sleep = fast_policy(backoff_initial_s=1.0)
    outcomes = [TransientError("boom"), RateLimited("slow down", retry_after_s=4.0), "ok"]
    timeouts = []

    def attempt(timeout_s):
        timeouts.append(timeout_s)
        outcome = outcomes.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    assert policy.call(attempt) == ("ok", 3)
    assert 0.5 <= sleep.calls[0] <= 1.0 and sleep.calls[1] == 4.0
    assert timeouts == [5.0, 5.0, 5.0]


def test_policy_never_retries_fatal_errors():
    policy, sleep = fast_policy()
    calls = []

    def attempt(timeout_s):
        calls.append(1)
        raise FatalProviderError("bad request")

    with pytest.raises(FatalProviderError, match="bad request"):
        policy.call(attempt)
    assert len(calls) == 1 and sleep.calls == []


def test_policy_gives_up_after_max_attempts():
    policy, sleep = fast_policy(max_attempts=4)

    def attempt(timeout_s):
        raise TransientError("HTTP 503: down")

    with pytest.raises(RetriesExhausted) as caught:
        policy.call(attempt)
    assert caught.value.attempts == 4 and len(sleep.calls) == 3
    assert isinstance(caught.value.last_error, TransientError)
    assert "after 4 attempts: HTTP 503: down" in str(caught.value)


def test_policy_stops_when_the_wait_would_pass_the_deadline():
    policy, sleep = fast_policy(deadline_s=60.0)

    def attempt(timeout_s):
        raise RateLimited("rate limited", retry_after_s=120.0)

    with pytest.raises(RetriesExhausted, match="would pass the 60s deadline") as caught:
        policy.call(attempt)
    assert caught.value.attempts == 1 and sleep.calls == []


def test_policy_shrinks_the_last_attempt_timeout_to_the_deadline():
    clock = [0.0]
    policy = RetryPolicy(deadline_s=10.0, attempt_timeout_s=8.0, backoff_initial_s=1.0,
                         sleep=lambda s: clock.__setitem__(0, clock[0] + s), clock=lambda: clock[0],
                         rng=random.Random(1))
    timeouts = []

    def attempt(timeout_s):
        timeouts.append(timeout_s)
        clock[0] += timeout_s
        raise TransientError("timed out")

    with pytest.raises(RetriesExhausted):
        policy.call(attempt)
    assert timeouts[0] == 8.0 and timeouts[1] < 2.0


def test_concurrency_cap_per_endpoint():
    limiter = concurrency_limiter("test", "http://cap.test/v1", 2)
    assert concurrency_limiter("test", "http://cap.test/v1/", 2) is limiter
    assert concurrency_limiter("test", "http://other.test/v1", 2) is not limiter
    active, peak, lock = [0], [0], threading.Lock()

    def work():
        with limiter:
            with lock:
                active[0] += 1
                peak[0] = max(peak[0], active[0])
            time.sleep(0.02)
            with lock:
                active[0] -= 1

    threads = [threading.Thread(target=work) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert peak[0] == 2


# -- scripted --------------------------------------------------------------------------------


def test_scripted_example_in_order_then_exhausted():
    model = make_model("scripted:example")
    first = model.complete([Message(role="user", content="go")])
    assert first.finish_reason == "tool_calls" and first.cost_usd == 0.0
    assert first.tool_calls == [ToolCall(id="call_ls", name="bash", arguments={"command": "cat reference.py"})]
    second = model.complete([Message(role="user", content="go"), first.to_message()])
    assert second.finish_reason == "stop" and "def solution" in second.text and not second.tool_calls
    assert model.received[1][1].tool_calls[0].name == "bash"
    with pytest.raises(ScriptExhausted, match="scripted:example has no response left: all 2 .*example.yaml"):
        model.complete([])


def test_script_from_path_with_usage_and_generated_ids(tmp_path):
    script = tmp_path / "mine.yaml"
    script.write_text("- just text\n"
                      "- text: call it\n  tool_calls: [{name: check, arguments: {}}]\n"
                      "  usage: {input_tokens: 10, output_tokens: 2}\n"
                      "- {text: cut, finish_reason: length}\n")
    responses = load_script(str(script))
    assert [r.text for r in responses] == ["just text", "call it", "cut"]
    assert responses[1].tool_calls[0].id == "call_1_0" and responses[1].usage.input_tokens == 10
    assert responses[2].finish_reason == "length"


def test_missing_or_broken_scripts_are_clear(tmp_path):
    with pytest.raises(FatalProviderError, match="no script 'nosuch'.*scripts shipped: .*example"):
        make_model("scripted:nosuch")
    broken = tmp_path / "broken.yaml"
    broken.write_text("- text: ok\n- {texts: typo}\n")
    with pytest.raises(FatalProviderError, match="cannot load the script .*broken.yaml: response 2: texts: Extra inputs"):
        make_model(f"scripted:{broken}")


# -- replay ----------------------------------------------------------------------------------


def write_trajectory(path, messages):
    path.write_text(json.dumps({"info": {"exit_status": "Submitted"}, "messages": messages,
                                "trajectory_format": "mini-swe-agent-1"}))
    return path


def test_replay_reissues_assistant_messages(tmp_path):
    path = write_trajectory(tmp_path / "trajectory.json", [
        {"role": "system", "content": "You write kernels."},
        {"role": "user", "content": "Task"},
        {"role": "assistant", "content": "first", "extra": {"response": {}}},
        {"role": "user", "content": "feedback"},
        {"role": "assistant", "content": [{"type": "text", "text": "sec"}, {"type": "text", "text": "ond"}],
         "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "bash", "arguments": "{\"command\": \"ls\"}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "a b"},
        {"role": "assistant", "content": "third", "tool_calls": [{"id": "c2", "name": "check", "arguments": {"x": 1}}]},
        {"role": "exit", "content": "", "extra": {}},
    ])
    model = make_model(f"replay:{path}")
    got = [model.complete([]) for _ in range(3)]
    assert [r.text for r in got] == ["first", "second", "third"]
    assert got[1].tool_calls == [ToolCall(id="c1", name="bash", arguments={"command": "ls"})]
    assert got[2].tool_calls[0].arguments == {"x": 1} and got[2].finish_reason == "tool_calls"
    with pytest.raises(ScriptExhausted, match="the replay is over: .* holds 3 answers"):
        model.complete([])


def test_replay_of_bad_files(tmp_path):
    with pytest.raises(FatalProviderError, match="no trajectory at"):
        make_model(f"replay:{tmp_path / 'missing.json'}")
    (tmp_path / "junk.json").write_text("{not json")
    with pytest.raises(FatalProviderError, match="junk.json is not a trajectory"):
        make_model(f"replay:{tmp_path / 'junk.json'}")
    write_trajectory(tmp_path / "empty.json", [{"role": "user", "content": "x"}])
    with pytest.raises(FatalProviderError, match="no assistant message"):
        make_model(f"replay:{tmp_path / 'empty.json'}")


def test_response_round_trips_as_json():
    response = ModelResponse(text="t", tool_calls=[ToolCall(id="1", name="n", arguments={"a": [1]})],
                             usage=Usage(input_tokens=3), cost_usd=None, model="m")
    assert ModelResponse.model_validate_json(response.model_dump_json()) == response
