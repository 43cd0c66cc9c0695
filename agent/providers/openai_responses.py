"""OpenAI's Responses API (``-o api=responses`` on an ``openai:`` model), through the ``openai``
SDK: the system prompt as ``instructions``, the conversation as input items (function calls and
their outputs as items, reasoning items sent back verbatim with ``store=False``), reasoning
summaries as the readable thinking, refusals kept. Streams where the chat path would."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from agent.providers.base import FatalProviderError, FinishReason, Message, ModelResponse, ToolCall, ToolSpec, Usage
from agent.providers.network import StreamWatch
from agent.providers.retry import error_for_status

if TYPE_CHECKING:
    from agent.providers.openai_chat import OpenAIChatModel

INCOMPLETE: dict[str, FinishReason] = {"max_output_tokens": "length", "content_filter": "content_filter"}
FINAL_EVENTS = ("response.completed", "response.incomplete", "response.failed")


def input_items(messages: list[Message]) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    for message in messages:
        if message.role in ("system", "exit"):
            continue
        if message.role == "tool":
            items.append({"type": "function_call_output", "call_id": message.tool_call_id or "", "output": message.content})
            continue
        if message.role == "assistant":
            items.extend(dict(b) for b in message.thinking_blocks or [] if b.get("type") == "reasoning")
            if message.content:
                items.append({"role": "assistant", "content": message.content})
            items.extend({"type": "function_call", "call_id": c.id, "name": c.name,
                          "arguments": c.raw_arguments if c.raw_arguments is not None else json.dumps(c.arguments)}
                         for c in message.tool_calls or [])
            continue
        items.append({"role": "user", "content": message.content})
    return items


def request_body(model: OpenAIChatModel, messages: list[Message], tools: list[ToolSpec] | None) -> dict[str, Any]:
    opts = model.options
    body: dict[str, Any] = {"model": model.name, "input": input_items(messages), "store": False}
    system = "\n\n".join(m.content for m in messages if m.role == "system")
    if system:
        body["instructions"] = system
    if tools:
        body["tools"] = [{"type": "function", "name": t.name, "description": t.description, "parameters": t.parameters}
                         for t in tools]
    if opts.max_output_tokens is not None:
        body["max_output_tokens"] = opts.max_output_tokens
    if opts.reasoning_effort:  # type: ignore[attr-defined]
        body["reasoning"] = {"effort": opts.reasoning_effort, "summary": "auto"}  # type: ignore[attr-defined]
        body["include"] = ["reasoning.encrypted_content"]
    for name in ("temperature", "top_p"):
        if getattr(opts, name) is not None:
            body[name] = getattr(opts, name)
    return body


def request_response(model: OpenAIChatModel, messages: list[Message], tools: list[ToolSpec] | None, timeout_s: float,
                     watch: StreamWatch, where: str) -> ModelResponse:
    body = request_body(model, messages, tools)
    extra = model.options.extra_body
    if not model.streams:
        return parse_response(model.client.responses.create(**body, extra_body=extra, timeout=timeout_s), where)
    final = None
    stream = model.client.responses.create(**body, stream=True, extra_body=extra, timeout=timeout_s)
    try:
        for event in stream:
            kind = getattr(event, "type", "")
            if kind == "response.output_text.delta":
                watch.add(text=event.delta)
            elif kind in ("response.reasoning_summary_text.delta", "response.reasoning_text.delta"):
                watch.add(thinking=event.delta)
            elif kind in FINAL_EVENTS:
                final = event.response
            elif kind == "error":
                raise error_for_status(502, str(getattr(event, "message", event)), None, where)
            else:
                watch.add()
    finally:
        stream.close()
    watch.report()
    if final is None:
        raise FatalProviderError(f"malformed response from {where}: the stream ended without the final response")
    response = parse_response(final, where)
    response.streamed = True
    return response


def parse_usage(usage: Any) -> Usage:
    if usage is None:
        return Usage(reported=False)
    cached = getattr(getattr(usage, "input_tokens_details", None), "cached_tokens", None)
    reasoning = getattr(getattr(usage, "output_tokens_details", None), "reasoning_tokens", None)
    return Usage(input_tokens=usage.input_tokens or 0, output_tokens=usage.output_tokens or 0,
                 cached_input_tokens=cached or 0, reasoning_tokens=reasoning or 0)


def parse_response(response: Any, where: str) -> ModelResponse:
    """The ModelResponse of a Responses API response; FatalProviderError when it is not one."""
    from openai.types.responses import Response

    if not isinstance(response, Response):
        raise FatalProviderError(f"malformed response from {where}: expected a response, got {str(response)[:200]!r}")
    if response.error is not None:
        raise error_for_status(502, f"{response.error.code}: {response.error.message}", None, where)
    texts: list[str] = []
    refusals: list[str] = []
    thoughts: list[str] = []
    blocks: list[dict[str, Any]] = []
    calls: list[ToolCall] = []
    for item in response.output:
        if item.type == "message":
            for part in item.content:
                if part.type == "output_text":
                    texts.append(part.text)
                elif part.type == "refusal":
                    refusals.append(part.refusal)
        elif item.type == "reasoning":
            blocks.append(item.model_dump(mode="json", exclude_none=True))
            thoughts.extend(s.text for s in item.summary or [])
            thoughts.extend(c.text for c in getattr(item, "content", None) or [] if getattr(c, "text", None))
        elif item.type == "function_call":
            try:
                arguments = json.loads(item.arguments) if item.arguments.strip() else {}
            except json.JSONDecodeError:
                arguments = None
            if isinstance(arguments, dict):
                calls.append(ToolCall(id=item.call_id, name=item.name, arguments=arguments))
            else:
                calls.append(ToolCall(id=item.call_id, name=item.name, arguments={}, raw_arguments=item.arguments))
    finish: FinishReason = "tool_calls" if calls else "stop"
    if response.status == "incomplete":
        reason = getattr(response.incomplete_details, "reason", None) or ""
        finish = INCOMPLETE.get(reason, "length")
    elif refusals and not texts:
        finish = "content_filter"
    return ModelResponse(text="".join(texts), tool_calls=calls, finish_reason=finish, usage=parse_usage(response.usage),
                         model=response.model or "", thinking="\n\n".join(thoughts) if thoughts else None,
                         thinking_blocks=blocks or None, refusal="\n".join(refusals) or None)
