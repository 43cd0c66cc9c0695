"""HTTP-edge fakes for the provider tests: an ``httpx.MockTransport`` that plays queued replies
and records requests, and a real local HTTP server (for timeouts, hangs and refused
connections). The SDK clients themselves are the real ones.

Both answer a request that asks to stream (``"stream": true``) with the server-sent events the
real API would send for the canned JSON body (``stream_events``: Anthropic's Messages events,
OpenAI's chat chunks or Responses events, by the request's path), so every canned reply works
for streamed and plain calls alike."""

from __future__ import annotations

import importlib
import json
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import ModuleType
from typing import Any

import httpx
import pytest

from agent.providers.retry import RetryPolicy

PROVIDER_ENV = ("OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_ORG_ID", "OPENAI_PROJECT_ID", "ANTHROPIC_API_KEY",
                "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_BASE_URL", "ANTHROPIC_PROFILE", "ANTHROPIC_CONFIG_DIR",
                "ANTHROPIC_CUSTOM_HEADERS", "TOGETHER_API_KEY", "VLLM_API_KEY", "VLLM_BASE_URL", "SGLANG_API_KEY",
                "SGLANG_BASE_URL", "OPENROUTER_API_KEY", "DEEPSEEK_API_KEY", "GEMINI_API_KEY", "KLOOP_PRICES")


@pytest.fixture(autouse=True)
def clean_env(monkeypatch, tmp_path):
    """No key, base URL or price file of the developer's leaks into a test."""
    for name in PROVIDER_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("ANTHROPIC_CONFIG_DIR", str(tmp_path / "anthropic-config"))


class FakeSleep:
    """Stands in for ``time.sleep`` in the retry policy: records, never waits."""

    def __init__(self) -> None:
        self.calls: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.calls.append(seconds)


def fast_policy(**overrides: Any) -> tuple[RetryPolicy, FakeSleep]:
    sleep = FakeSleep()
    settings = {"max_attempts": 6, "deadline_s": 600.0, "attempt_timeout_s": 5.0, **overrides}
    return RetryPolicy(sleep=sleep, **settings), sleep


@dataclass
class Canned:
    """One HTTP reply, built for whichever HTTP package (``httpx`` or ``httpx2``) the client uses."""

    status: int = 200
    json: Any = None
    content: bytes | None = None
    headers: dict[str, str] = field(default_factory=dict)

    def build(self, http: ModuleType, request_body: Any = None, path: str = "") -> Any:
        if streamed(request_body, self):
            return http.Response(self.status, content=stream_events(path, self.json, request_body),
                                 headers={**self.headers, "content-type": "text/event-stream"})
        if self.content is not None:
            return http.Response(self.status, content=self.content, headers=self.headers)
        return http.Response(self.status, json=self.json, headers=self.headers)


def json_reply(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> Canned:
    return Canned(status, json=body, headers=headers or {})


def raw_reply(content: bytes, status: int = 200, content_type: str = "application/json") -> Canned:
    return Canned(status, content=content, headers={"content-type": content_type})


def sdk_http(sdk: ModuleType) -> ModuleType:
    """The HTTP package an SDK's ``http_client`` must come from: ``httpx2`` for SDKs built on it
    (anthropic 2.x rejects ``httpx`` objects), else ``httpx``."""
    base_client = importlib.import_module(f"{sdk.__name__}._base_client")
    return importlib.import_module("httpx2") if hasattr(base_client, "httpx2") else httpx


Reply = Canned | Callable[[Any], Canned]


class Recorder:
    """A MockTransport handler: answers with the queued replies in order (the last one repeats)
    and keeps every request with its JSON body. ``http`` is the package of the client made."""

    def __init__(self, *replies: Reply, http: ModuleType = httpx):
        self.replies = list(replies)
        self.http = http
        self.requests: list[Any] = []
        self.lock = threading.Lock()

    def __call__(self, request: Any) -> Any:
        with self.lock:
            self.requests.append(request)
            reply = self.replies[min(len(self.requests), len(self.replies)) - 1]
        try:
            body = json.loads(request.content) if request.content else None
        except ValueError:
            body = None
        return (reply(request) if callable(reply) else reply).build(self.http, body, request.url.path)

    @property
    def bodies(self) -> list[dict[str, Any]]:
        return [json.loads(r.content) for r in self.requests]

    def client(self) -> Any:
        return self.http.Client(transport=self.http.MockTransport(self))


def openai_completion(text: str = "hello", model: str = "gpt-5-2025-08-07", finish_reason: str = "stop",
                      tool_calls: list[dict] | None = None, usage: dict | None = None, **message_extra: Any) -> dict:
    message: dict[str, Any] = {"role": "assistant", "content": text, **message_extra}
    if tool_calls:
        message["tool_calls"] = tool_calls
    return {"id": "chatcmpl-1", "object": "chat.completion", "created": 1_700_000_000, "model": model,
            "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
            "usage": usage or {"prompt_tokens": 1000, "completion_tokens": 500, "total_tokens": 1500,
                               "prompt_tokens_details": {"cached_tokens": 400},
                               "completion_tokens_details": {"reasoning_tokens": 300}}}


def anthropic_message(content: list[dict] | None = None, model: str = "claude-sonnet-4-5-20250929",
                      stop_reason: str = "end_turn", usage: dict | None = None) -> dict:
    return {"id": "msg_1", "type": "message", "role": "assistant", "model": model,
            "content": content if content is not None else [{"type": "text", "text": "hello"}],
            "stop_reason": stop_reason, "stop_sequence": None,
            "usage": usage or {"input_tokens": 100, "output_tokens": 50, "cache_read_input_tokens": 2000,
                               "cache_creation_input_tokens": 300}}


class LocalServer:
    """A real HTTP server on 127.0.0.1 that plays a script of (delay_s, status, body) replies;
    the last one repeats, and keeps each request's path and JSON body. A client that gave up on a
    slow reply is fine."""

    def __init__(self, *replies: tuple[float, int, Any]):
        self.replies = list(replies)
        self.paths: list[str] = []
        self.bodies: list[Any] = []
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length)
                with server.lock:
                    server.paths.append(self.path)
                    server.bodies.append(json.loads(body) if body else None)
                    delay, status, body = server.replies[min(len(server.paths), len(server.replies)) - 1]
                time.sleep(delay)
                content_type = "application/json"
                if streamed(server.bodies[-1], Canned(status, json=body)):
                    payload, content_type = stream_events(self.path, body, server.bodies[-1]), "text/event-stream"
                elif isinstance(body, bytes):
                    payload = body
                else:
                    payload = json.dumps(body).encode()
                try:
                    self.send_response(status)
                    self.send_header("content-type", content_type)
                    self.send_header("content-length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                except OSError:
                    pass

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def __enter__(self) -> LocalServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def closed_port() -> int:
    """A local port nothing listens on (connection refused)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def streamed(request_body: Any, reply: Canned) -> bool:
    return (isinstance(request_body, dict) and request_body.get("stream") is True and reply.status == 200
            and reply.content is None and isinstance(reply.json, dict))


def _sse(events: list[tuple[str | None, Any]]) -> bytes:
    lines = []
    for name, data in events:
        if name:
            lines.append(f"event: {name}")
        lines.append("data: " + (data if isinstance(data, str) else json.dumps(data)))
        lines.append("")
    return ("\n".join(lines) + "\n").encode()


def _halves(text: str) -> list[str]:
    middle = len(text) // 2
    return [part for part in (text[:middle], text[middle:]) if part]


def stream_events(path: str, body: dict, request_body: dict | None = None) -> bytes:
    """The event stream the real API sends for the final object ``body``."""
    if path.endswith("/messages"):
        return _sse(anthropic_events(body))
    if path.endswith("/responses"):
        return _sse(responses_events(body))
    return _sse(chat_chunks(body, bool(((request_body or {}).get("stream_options") or {}).get("include_usage"))))


def anthropic_events(message: dict) -> list[tuple[str, dict]]:
    start = {**message, "content": [], "stop_reason": None, "stop_sequence": None}
    events: list[tuple[str, dict]] = [("message_start", {"type": "message_start", "message": start})]
    for index, block in enumerate(message.get("content") or []):
        kind = block.get("type")
        empty = {"text": {"type": "text", "text": ""}, "thinking": {"type": "thinking", "thinking": "", "signature": ""},
                 "tool_use": {**block, "input": {}}}.get(kind, block)
        events.append(("content_block_start", {"type": "content_block_start", "index": index, "content_block": empty}))
        deltas = []
        if kind == "text":
            deltas = [{"type": "text_delta", "text": part} for part in _halves(block["text"])]
        elif kind == "thinking":
            deltas = [{"type": "thinking_delta", "thinking": part} for part in _halves(block["thinking"])]
            deltas.append({"type": "signature_delta", "signature": block.get("signature", "")})
        elif kind == "tool_use":
            deltas = [{"type": "input_json_delta", "partial_json": part} for part in _halves(json.dumps(block.get("input", {})))]
        events += [("content_block_delta", {"type": "content_block_delta", "index": index, "delta": d}) for d in deltas]
        events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
    usage = message.get("usage") or {}
    events.append(("message_delta", {"type": "message_delta", "delta": {"stop_reason": message.get("stop_reason"),
                                                                        "stop_sequence": None},
                                     "usage": {"output_tokens": usage.get("output_tokens", 0)}}))
    events.append(("message_stop", {"type": "message_stop"}))
    return events


def chat_chunks(completion: dict, include_usage: bool) -> list[tuple[None, Any]]:
    if "choices" not in completion:  # an error body: sent as it is
        return [(None, completion), (None, "[DONE]")]
    base = {key: completion[key] for key in ("id", "created", "model") if key in completion}
    base["object"] = "chat.completion.chunk"
    chunks: list[tuple[None, Any]] = []
    for choice in completion["choices"]:
        message = dict(choice.get("message") or {})
        text = message.pop("content", None) or ""
        calls = message.pop("tool_calls", None) or []
        pieces = _halves(text) or [""]
        for number, piece in enumerate(pieces):
            delta = {"role": "assistant", **message} if number == 0 else {}
            delta["content"] = piece
            if number == 0 and calls:
                delta["tool_calls"] = [{"index": j, **call} for j, call in enumerate(calls)]
            chunks.append((None, {**base, "choices": [{"index": choice.get("index", 0), "delta": delta, "finish_reason": None}]}))
        chunks.append((None, {**base, "choices": [{"index": choice.get("index", 0), "delta": {},
                                                    "finish_reason": choice.get("finish_reason")}]}))
    if include_usage and completion.get("usage"):
        chunks.append((None, {**base, "choices": [], "usage": completion["usage"]}))
    chunks.append((None, "[DONE]"))
    return chunks


def responses_events(response: dict) -> list[tuple[str, dict]]:
    events: list[tuple[str, dict]] = [("response.created", {"type": "response.created", "sequence_number": 0,
                                                            "response": {**response, "status": "in_progress", "output": []}})]
    for index, item in enumerate(response.get("output") or []):
        if item.get("type") == "reasoning":
            for number, summary in enumerate(item.get("summary") or []):
                events.append(("response.reasoning_summary_text.delta", {
                    "type": "response.reasoning_summary_text.delta", "item_id": item.get("id", ""), "output_index": index,
                    "summary_index": number, "delta": summary.get("text", ""), "sequence_number": len(events)}))
        if item.get("type") == "message":
            for number, part in enumerate(item.get("content") or []):
                for piece in _halves(part.get("text", "")) if part.get("type") == "output_text" else []:
                    events.append(("response.output_text.delta", {
                        "type": "response.output_text.delta", "item_id": item.get("id", ""), "output_index": index,
                        "content_index": number, "delta": piece, "logprobs": [], "sequence_number": len(events)}))
    final = "response.incomplete" if response.get("status") == "incomplete" else "response.completed"
    events.append((final, {"type": final, "response": response, "sequence_number": len(events)}))
    return events


def openai_response(text: str = "hello", model: str = "gpt-5-2025-08-07", reasoning: str | None = None,
                    function_calls: list[dict] | None = None, refusal: str | None = None, usage: dict | None = None,
                    status: str = "completed", incomplete_reason: str | None = None) -> dict:
    """A Responses API response body."""
    output: list[dict] = []
    if reasoning is not None:
        output.append({"id": "rs_1", "type": "reasoning", "summary": [{"type": "summary_text", "text": reasoning}],
                       "encrypted_content": "enc=="})
    content: list[dict] = []
    if text:
        content.append({"type": "output_text", "text": text, "annotations": []})
    if refusal:
        content.append({"type": "refusal", "refusal": refusal})
    if content:
        output.append({"id": "msg_1", "type": "message", "role": "assistant", "status": "completed", "content": content})
    for number, call in enumerate(function_calls or []):
        output.append({"id": f"fc_{number}", "type": "function_call", "call_id": call.get("call_id", f"call_{number}"),
                       "name": call["name"], "arguments": call.get("arguments", "{}"), "status": "completed"})
    return {"id": "resp_1", "object": "response", "created_at": 1_700_000_000, "model": model, "status": status,
            "output": output, "parallel_tool_calls": True, "tool_choice": "auto", "tools": [], "error": None,
            "incomplete_details": {"reason": incomplete_reason} if incomplete_reason else None,
            "usage": usage if usage is not None else {
                "input_tokens": 1000, "output_tokens": 500, "total_tokens": 1500, "input_tokens_details": {"cached_tokens": 400},
                "output_tokens_details": {"reasoning_tokens": 300}}}
