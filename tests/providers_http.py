"""HTTP-edge fakes for the provider tests: an ``httpx.MockTransport`` that plays queued replies
and records requests, and a real local HTTP server (for timeouts and refused connections).
The SDK clients themselves are the real ones."""

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

    def build(self, http: ModuleType) -> Any:
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
        return (reply(request) if callable(reply) else reply).build(self.http)

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
                payload = json.dumps(body).encode()
                try:
                    self.send_response(status)
                    self.send_header("content-type", "application/json")
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
