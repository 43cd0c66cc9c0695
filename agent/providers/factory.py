"""``make_model("provider:model", **options)``: the one way to get a Model from a spec string."""

from __future__ import annotations

from typing import Any

import structlog
from pydantic import ValidationError

from agent.providers.base import InvalidModelSpec, Model

log = structlog.get_logger(__name__)

OPENAI_COMPATIBLE = ("openai", "together", "vllm", "sglang", "openrouter", "deepseek", "gemini")
OFFLINE = ("scripted", "replay", "baseline")
PROVIDERS = (*OPENAI_COMPATIBLE, "anthropic", *OFFLINE)


def make_model(spec: str, *, problem: Any = None, **options: Any) -> Model:
    """A model from ``PROVIDER:MODEL``: ``openai:gpt-5``, ``anthropic:claude-sonnet-4-5``,
    ``vllm:Qwen/Qwen3-32B``, ``scripted:example``, ``replay:runs/<run folder>``, ...

    Network options: api_key, base_url, max_output_tokens, temperature, top_p, extra_body,
    default_headers, max_attempts, deadline_s, attempt_timeout_s, stream, max_concurrency, retry,
    http_client, prices; OpenAI-compatible: reasoning_effort, max_tokens_param, seed, api ("chat" or
    "responses");
    Anthropic: thinking_budget_tokens, thinking, cache_prompt, cache_conversation.
    Offline models (scripted, replay, baseline) ignore options. ``problem`` (a loaded Problem)
    is what the baselines answer from (``baseline:reference``, ``baseline:oracle``); the other
    providers ignore it."""
    provider, sep, name = spec.partition(":")
    provider = provider.strip().lower()
    if not sep or not name.strip() or provider not in PROVIDERS:
        raise InvalidModelSpec(f"model spec {spec!r} is not PROVIDER:MODEL with PROVIDER one of "
                               f"{', '.join(PROVIDERS)} (e.g. openai:gpt-5, anthropic:claude-sonnet-4-5)")
    name = name.strip()
    if provider in OFFLINE and options:
        log.debug("offline model ignores options", spec=spec, options=sorted(options))
    try:
        if provider in OPENAI_COMPATIBLE:
            from agent.providers.openai_chat import OpenAIChatModel

            return OpenAIChatModel(spec, name, provider, **options)
        if provider == "anthropic":
            from agent.providers.anthropic_messages import AnthropicModel

            return AnthropicModel(spec, name, **options)
        if provider == "baseline":
            from agent.providers.baseline import BaselineModel

            return BaselineModel(spec, name, problem)
        if provider == "scripted":
            from agent.providers.scripted import ScriptedModel

            return ScriptedModel(spec, name)
        from agent.providers.replay import ReplayModel

        return ReplayModel(spec, name)
    except ValidationError as error:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'options'}: {e['msg']}" for e in error.errors())
        raise InvalidModelSpec(f"bad options for {spec}: {problems}") from None
