"""Anthropic's Messages API through the ``anthropic`` SDK: the system prompt as ``system``,
prompt caching of the static prefix, extended thinking kept apart from the answer, tools."""

from __future__ import annotations

import os
from typing import Any

import anthropic
from pydantic import Field, model_validator

from agent.providers.base import (FatalProviderError, FinishReason, Message, MissingApiKey, ModelResponse, ToolCall,
                                  ToolSpec, Usage)
from agent.providers.network import NetworkModel, NetworkOptions, StreamWatch, env_or

DEFAULT_BASE_URL = "https://api.anthropic.com"
DEFAULT_MAX_OUTPUT_TOKENS = 16384
NONSTREAMING_MAX_TOKENS = 21_333
"""Above this output cap the SDK expects the call may pass 10 minutes and wants it streamed (it
only lets an explicit timeout through without streaming); such calls stream."""
EPHEMERAL = {"type": "ephemeral"}
SDK_ARGUMENTS = {"model", "max_tokens", "messages", "system", "tools", "thinking"}

STOP_REASONS: dict[str, FinishReason] = {
    "end_turn": "stop", "stop_sequence": "stop", "pause_turn": "stop", "max_tokens": "length",
    "model_context_window_exceeded": "length", "tool_use": "tool_calls", "refusal": "content_filter",
}


class AnthropicOptions(NetworkOptions):
    thinking_budget_tokens: int | None = Field(default=None, ge=1024)
    """Extended thinking: ``thinking={"type": "enabled", "budget_tokens": N}``."""
    thinking: dict[str, Any] | None = None
    """A raw ``thinking`` parameter (``{"type": "adaptive"}``), instead of the budget."""
    cache_prompt: bool = True
    """``cache_control`` on the system block and on the first user message (the static task)."""
    cache_conversation: bool = False
    """Also a cache breakpoint on the last user message, so each turn reads the one before."""

    @model_validator(mode="after")
    def _check(self) -> AnthropicOptions:
        if self.thinking is not None and self.thinking_budget_tokens is not None:
            raise ValueError("give thinking_budget_tokens or thinking, not both")
        if self.thinking_budget_tokens and self.max_output_tokens and self.max_output_tokens <= self.thinking_budget_tokens:
            raise ValueError(f"max_output_tokens ({self.max_output_tokens}) must exceed thinking_budget_tokens "
                             f"({self.thinking_budget_tokens}): thinking counts towards it")
        return self


class AnthropicModel(NetworkModel):
    provider = "anthropic"
    sdk = anthropic

    def __init__(self, spec: str, name: str, **options: Any):
        opts = AnthropicOptions(**options)
        super().__init__(spec, name, opts)
        self.base_url = env_or(opts.base_url, "ANTHROPIC_BASE_URL", DEFAULT_BASE_URL)
        api_key = opts.api_key or os.environ.get("ANTHROPIC_API_KEY")
        auth_token = None if api_key else os.environ.get("ANTHROPIC_AUTH_TOKEN")  # the SDK's bearer-token credential
        if not (api_key or auth_token):
            raise MissingApiKey("ANTHROPIC_API_KEY", self.provider)
        credential = {"api_key": api_key} if api_key else {"auth_token": auth_token}
        self.client = anthropic.Anthropic(**credential, base_url=self.base_url, max_retries=0,
                                          default_headers=opts.default_headers, http_client=opts.http_client)

    def request_body(self, messages: list[Message], tools: list[ToolSpec] | None) -> dict[str, Any]:
        opts: AnthropicOptions = self.options  # type: ignore[assignment]
        thinking = opts.thinking
        if opts.thinking_budget_tokens:
            thinking = {"type": "enabled", "budget_tokens": opts.thinking_budget_tokens}
        max_tokens = opts.max_output_tokens or DEFAULT_MAX_OUTPUT_TOKENS + (opts.thinking_budget_tokens or 0)
        body: dict[str, Any] = {"model": self.name, "max_tokens": max_tokens,
                                "messages": anthropic_turns(messages, opts.cache_prompt, opts.cache_conversation)}
        system = "\n\n".join(m.content for m in messages if m.role == "system")
        if system:
            block: dict[str, Any] = {"type": "text", "text": system}
            if opts.cache_prompt:
                block["cache_control"] = EPHEMERAL
            body["system"] = [block]
        if tools:
            body["tools"] = [{"name": t.name, "description": t.description, "input_schema": t.parameters} for t in tools]
        if thinking:
            body["thinking"] = thinking
        for name in ("temperature", "top_p"):
            if getattr(opts, name) is not None:
                body[name] = getattr(opts, name)
        return body

    def streams(self, body: dict[str, Any]) -> bool:
        """Stream when asked to, or when the call can be long: thinking on, or a large output cap."""
        if self.options.stream is not None:
            return self.options.stream
        return "thinking" in body or body["max_tokens"] > NONSTREAMING_MAX_TOKENS

    def _request(self, messages: list[Message], tools: list[ToolSpec] | None, timeout_s: float,
                 watch: StreamWatch) -> ModelResponse:
        body = self.request_body(messages, tools)
        where = f"{self.provider} ({self.base_url})"
        # sampling fields travel as extra body: some SDK versions no longer take them as arguments
        arguments = {k: v for k, v in body.items() if k in SDK_ARGUMENTS}
        extra = {**{k: v for k, v in body.items() if k not in SDK_ARGUMENTS}, **(self.options.extra_body or {})}
        if not self.streams(body):
            reply = self.client.messages.create(**arguments, extra_body=extra or None, timeout=timeout_s)
            return parse_message(reply, where)
        with self.client.messages.stream(**arguments, extra_body=extra or None, timeout=timeout_s) as stream:
            for event in stream:
                delta = getattr(event, "delta", None) if event.type == "content_block_delta" else None
                watch.add(text=getattr(delta, "text", "") or "", thinking=getattr(delta, "thinking", "") or "")
            reply = stream.get_final_message()
        watch.report()
        response = parse_message(reply, where)
        response.streamed = True
        return response


def anthropic_turns(messages: list[Message], cache_first_user: bool, cache_last_user: bool) -> list[dict[str, Any]]:
    """Alternating user/assistant turns of content blocks: tool results become ``tool_result``
    blocks of a user turn, consecutive same-role messages merge, system messages are left out."""
    turns: list[dict[str, Any]] = []
    for message in messages:
        if message.role == "system":
            continue
        role = "assistant" if message.role == "assistant" else "user"
        blocks: list[dict[str, Any]] = []
        if message.role == "tool":
            blocks.append({"type": "tool_result", "tool_use_id": message.tool_call_id or "", "content": message.content})
        else:
            if message.role == "assistant":
                blocks.extend(dict(b) for b in message.thinking_blocks or [] if b.get("type") in ("thinking", "redacted_thinking"))
            if message.content:
                blocks.append({"type": "text", "text": message.content})
            blocks.extend({"type": "tool_use", "id": c.id, "name": c.name, "input": c.arguments}
                          for c in message.tool_calls or [])
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": role, "content": blocks})
    for turn in turns:
        if not turn["content"]:
            turn["content"].append({"type": "text", "text": "(empty)"})
    user_turns = [t for t in turns if t["role"] == "user"]
    marked = ([user_turns[0]] if cache_first_user and user_turns else []) + (
        [user_turns[-1]] if cache_last_user and user_turns else [])
    for turn in marked:
        turn["content"][-1]["cache_control"] = EPHEMERAL
    return turns


def parse_usage(usage: Any) -> Usage:
    if usage is None:
        return Usage(reported=False)
    cache_read = usage.cache_read_input_tokens or 0
    cache_write = usage.cache_creation_input_tokens or 0
    details = getattr(usage, "output_tokens_details", None)
    return Usage(input_tokens=(usage.input_tokens or 0) + cache_read + cache_write, output_tokens=usage.output_tokens or 0,
                 cached_input_tokens=cache_read, cache_write_input_tokens=cache_write,
                 reasoning_tokens=getattr(details, "thinking_tokens", None) or 0)


def parse_message(reply: Any, where: str) -> ModelResponse:
    """The ModelResponse of a Messages API reply; FatalProviderError when the body is not one."""
    if not isinstance(reply, anthropic.types.Message):
        raise FatalProviderError(f"malformed response from {where}: expected a message, got {str(reply)[:200]!r}")
    try:
        texts: list[str] = []
        thoughts: list[str] = []
        thinking_blocks: list[dict[str, Any]] = []
        calls: list[ToolCall] = []
        for block in reply.content:
            if block.type == "text":
                texts.append(block.text)
            elif block.type in ("thinking", "redacted_thinking"):
                thinking_blocks.append(block.model_dump(mode="json", exclude_none=True))
                if block.type == "thinking":
                    thoughts.append(block.thinking)
            elif block.type == "tool_use":
                arguments = block.input if isinstance(block.input, dict) else {}
                calls.append(ToolCall(id=block.id, name=block.name, arguments=arguments,
                                      raw_arguments=None if isinstance(block.input, dict) else str(block.input)))
        return ModelResponse(
            text="".join(texts), tool_calls=calls, finish_reason=STOP_REASONS.get(reply.stop_reason or "end_turn", "error"),
            usage=parse_usage(reply.usage), model=reply.model or "",
            thinking="\n\n".join(thoughts) if thinking_blocks else None, thinking_blocks=thinking_blocks or None)
    except (AttributeError, KeyError, TypeError, ValueError) as err:
        raise FatalProviderError(f"malformed response from {where}: not a Messages API reply ({type(err).__name__}: "
                                 f"{err})") from err
