"""OpenAI's Chat Completions API through the ``openai`` SDK, and every server that speaks it
(Together, vLLM, SGLang, OpenRouter, DeepSeek, Gemini's OpenAI-compatible endpoint); with
``api="responses"`` (``-o api=responses``) OpenAI's Responses API instead (see
``openai_responses``). Calls stream where they can be long (``reasoning_effort`` set, or
``stream=True``): the answer's progress is reported and a silent endpoint is cut after the idle
timeout instead of after the whole call's."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

import openai
from openai.types.chat import ChatCompletion

from agent.providers.base import (FatalProviderError, FinishReason, Message, ModelResponse, ToolCall, ToolSpec,
                                  Usage)
from agent.providers.network import NetworkModel, NetworkOptions, StreamWatch, env_or, resolve_key
from agent.providers.retry import error_for_status


@dataclass(frozen=True)
class Endpoint:
    """Where an OpenAI-compatible provider lives and how it wants its key."""

    base_url: str
    key_env: str
    key_required: bool = True
    base_url_env: str | None = None
    max_tokens_param: str = "max_tokens"


ENDPOINTS = {
    "openai": Endpoint("https://api.openai.com/v1", "OPENAI_API_KEY", base_url_env="OPENAI_BASE_URL",
                       max_tokens_param="max_completion_tokens"),
    "together": Endpoint("https://api.together.xyz/v1", "TOGETHER_API_KEY"),
    "vllm": Endpoint("http://localhost:8000/v1", "VLLM_API_KEY", key_required=False, base_url_env="VLLM_BASE_URL"),
    "sglang": Endpoint("http://localhost:30000/v1", "SGLANG_API_KEY", key_required=False, base_url_env="SGLANG_BASE_URL"),
    "openrouter": Endpoint("https://openrouter.ai/api/v1", "OPENROUTER_API_KEY"),
    "deepseek": Endpoint("https://api.deepseek.com", "DEEPSEEK_API_KEY"),
    "gemini": Endpoint("https://generativelanguage.googleapis.com/v1beta/openai/", "GEMINI_API_KEY"),
}

FINISH_REASONS: dict[str, FinishReason] = {
    "stop": "stop", "length": "length", "tool_calls": "tool_calls", "function_call": "tool_calls",
    "content_filter": "content_filter", "error": "error", "eos": "stop", "end_turn": "stop",
}


class OpenAIOptions(NetworkOptions):
    reasoning_effort: str | None = None
    """Passed through as ``reasoning_effort`` ("minimal", "low", "medium", "high", ...)."""
    max_tokens_param: Literal["max_completion_tokens", "max_tokens"] | None = None
    """Which request field carries ``max_output_tokens``; the endpoint's preset by default."""
    seed: int | None = None
    api: Literal["chat", "responses"] = "chat"
    """Which OpenAI API: Chat Completions, or the Responses API (reasoning summaries, refusals as
    parts, function calls as items)."""


class OpenAIChatModel(NetworkModel):
    sdk = openai

    def __init__(self, spec: str, name: str, provider: str = "openai", **options: Any):
        endpoint = ENDPOINTS[provider]
        opts = OpenAIOptions(**options)
        super().__init__(spec, name, opts)
        self.provider = provider
        self.endpoint = endpoint
        self.base_url = env_or(opts.base_url, endpoint.base_url_env, endpoint.base_url)
        key = resolve_key(opts.api_key, (endpoint.key_env,), provider, endpoint.key_required)
        self.client = openai.OpenAI(api_key=key or "EMPTY", base_url=self.base_url, max_retries=0,
                                    default_headers=opts.default_headers, http_client=opts.http_client)

    def request_body(self, messages: list[Message], tools: list[ToolSpec] | None) -> dict[str, Any]:
        opts: OpenAIOptions = self.options  # type: ignore[assignment]
        body: dict[str, Any] = {"model": self.name, "messages": [chat_message(m) for m in messages]}
        if tools:
            body["tools"] = [{"type": "function", "function": {"name": t.name, "description": t.description,
                                                               "parameters": t.parameters}} for t in tools]
        if opts.max_output_tokens is not None:
            body[opts.max_tokens_param or self.endpoint.max_tokens_param] = opts.max_output_tokens
        for name in ("reasoning_effort", "temperature", "top_p", "seed"):
            if getattr(opts, name) is not None:
                body[name] = getattr(opts, name)
        return body

    @property
    def streams(self) -> bool:
        opts: OpenAIOptions = self.options  # type: ignore[assignment]
        return opts.stream if opts.stream is not None else bool(opts.reasoning_effort)

    def _request(self, messages: list[Message], tools: list[ToolSpec] | None, timeout_s: float,
                 watch: StreamWatch) -> ModelResponse:
        where = f"{self.provider} ({self.base_url})"
        if self.options.api == "responses":  # type: ignore[attr-defined]
            from agent.providers.openai_responses import request_response

            return request_response(self, messages, tools, timeout_s, watch, where)
        body = self.request_body(messages, tools)
        if self.streams:
            stream = self.client.chat.completions.create(**body, stream=True, stream_options={"include_usage": True},
                                                         extra_body=self.options.extra_body, timeout=timeout_s)
            return read_chat_stream(stream, watch, where)
        completion = self.client.chat.completions.create(**body, extra_body=self.options.extra_body, timeout=timeout_s)
        return parse_completion(completion, where)


def chat_message(message: Message) -> dict[str, Any]:
    if message.role == "tool":
        return {"role": "tool", "tool_call_id": message.tool_call_id or "", "content": message.content}
    if message.role == "assistant" and message.tool_calls:
        return {"role": "assistant", "content": message.content or None, "tool_calls": [
            {"id": call.id, "type": "function", "function": {
                "name": call.name,
                "arguments": call.raw_arguments if call.raw_arguments is not None else json.dumps(call.arguments)}}
            for call in message.tool_calls]}
    return {"role": message.role, "content": message.content}


def parse_tool_call(call: Any) -> ToolCall:
    raw = call.function.arguments or ""
    try:
        arguments = json.loads(raw) if raw.strip() else {}
    except json.JSONDecodeError:
        arguments = None
    if isinstance(arguments, dict):
        return ToolCall(id=call.id or "", name=call.function.name, arguments=arguments)
    return ToolCall(id=call.id or "", name=call.function.name, arguments={}, raw_arguments=raw)


def parse_usage(usage: Any) -> Usage:
    if usage is None:
        return Usage(reported=False)
    prompt_details = getattr(usage, "prompt_tokens_details", None)
    completion_details = getattr(usage, "completion_tokens_details", None)
    cached = getattr(prompt_details, "cached_tokens", None)
    if cached is None:  # DeepSeek reports its cache hits here
        cached = (getattr(usage, "model_extra", None) or {}).get("prompt_cache_hit_tokens")
    return Usage(input_tokens=usage.prompt_tokens or 0, output_tokens=usage.completion_tokens or 0,
                 cached_input_tokens=cached or 0,
                 reasoning_tokens=getattr(completion_details, "reasoning_tokens", None) or 0)


def parse_completion(completion: Any, where: str) -> ModelResponse:
    """The ModelResponse of a chat completion; FatalProviderError when the body is not one."""
    if not isinstance(completion, ChatCompletion):
        raise FatalProviderError(f"malformed response from {where}: expected a chat completion, got "
                                 f"{str(completion)[:200]!r}")
    _gateway_error(completion.model_extra, where)
    try:
        choice = completion.choices[0]
        message = choice.message
        extra = message.model_extra or {}
        thinking = extra.get("reasoning_content") or extra.get("reasoning")
        finish = FINISH_REASONS.get(choice.finish_reason or "stop", "error")
        return ModelResponse(
            text=message.content or "", tool_calls=[parse_tool_call(c) for c in message.tool_calls or []],
            finish_reason=finish, usage=parse_usage(completion.usage), model=completion.model or "",
            thinking=thinking if isinstance(thinking, str) else None, refusal=getattr(message, "refusal", None) or None)
    except (AttributeError, IndexError, KeyError, TypeError, ValueError) as err:
        raise FatalProviderError(f"malformed response from {where}: not a chat completion ({type(err).__name__}: "
                                 f"{err}); body starts {completion.model_dump_json(exclude_none=True)[:200]!r}") from err


def _gateway_error(extra: dict[str, Any] | None, where: str) -> None:
    error = (extra or {}).get("error")
    if error:  # some gateways (OpenRouter) answer 200 with an error body, or end a stream with one
        detail = error.get("message", error) if isinstance(error, dict) else error
        code = error.get("code") if isinstance(error, dict) else None
        raise error_for_status(code if isinstance(code, int) else 502, str(detail), None, where)


def read_chat_stream(stream: Any, watch: StreamWatch, where: str) -> ModelResponse:
    """The ModelResponse of a streamed chat completion (chunks put together)."""
    text: list[str] = []
    thinking: list[str] = []
    refusal: list[str] = []
    calls: dict[int, dict[str, str]] = {}
    finish, usage, model, chunks = None, None, "", 0
    try:
        for chunk in stream:
            chunks += 1
            _gateway_error(chunk.model_extra, where)
            model = chunk.model or model
            usage = chunk.usage or usage
            for choice in chunk.choices or []:
                delta = choice.delta
                extra = delta.model_extra or {}
                thought = extra.get("reasoning_content") or extra.get("reasoning")
                thought = thought if isinstance(thought, str) else ""
                text.append(delta.content or "")
                thinking.append(thought)
                refusal.append(getattr(delta, "refusal", None) or "")
                for call in delta.tool_calls or []:
                    slot = calls.setdefault(call.index, {"id": "", "name": "", "arguments": ""})
                    slot["id"] = call.id or slot["id"]
                    if call.function is not None:
                        slot["name"] += call.function.name or ""
                        slot["arguments"] += call.function.arguments or ""
                finish = choice.finish_reason or finish
                watch.add(text=delta.content or "", thinking=thought)
    finally:
        stream.close()
    watch.report()
    if not chunks:
        raise FatalProviderError(f"malformed response from {where}: the stream carried no chunk")
    tool_calls = []
    for _, slot in sorted(calls.items()):
        function = type("Function", (), {"name": slot["name"], "arguments": slot["arguments"]})
        tool_calls.append(parse_tool_call(type("Call", (), {"id": slot["id"], "function": function})))
    joined_thinking = "".join(thinking)
    return ModelResponse(text="".join(text), tool_calls=tool_calls, finish_reason=FINISH_REASONS.get(finish or "stop", "error"),
                         usage=parse_usage(usage), model=model, thinking=joined_thinking or None,
                         refusal="".join(refusal) or None, streamed=True)
