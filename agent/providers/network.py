"""What every network provider shares: its options, retries, the concurrency cap, timing,
cost and the log line of each call. A provider implements ``_request`` (one HTTP attempt)."""

from __future__ import annotations

import os
import time
from types import ModuleType
from typing import Any

import structlog
from pydantic import BaseModel, ConfigDict, Field

from agent.providers.base import (DeadlineExceeded, Message, MissingApiKey, ModelResponse, Progress, ProviderError,
                                  ProviderTimeout, ToolSpec)
from agent.providers.prices import PriceTable, load_prices
from agent.providers.retry import DEFAULT_MAX_CONCURRENCY, RetryPolicy, classify_sdk_error, concurrency_limiter

log = structlog.get_logger(__name__)


class NetworkOptions(BaseModel):
    """Options every network provider takes (``make_model(spec, **options)``)."""

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True, protected_namespaces=())

    api_key: str | None = None
    base_url: str | None = None
    max_output_tokens: int | None = Field(default=None, gt=0)
    temperature: float | None = None
    top_p: float | None = None
    extra_body: dict[str, Any] | None = None
    default_headers: dict[str, str] | None = None
    max_attempts: int = Field(default=RetryPolicy.max_attempts, ge=1)
    deadline_s: float = Field(default=RetryPolicy.deadline_s, gt=0)
    attempt_timeout_s: float = Field(default=RetryPolicy.attempt_timeout_s, gt=0)
    """A non-streamed attempt's whole time; a streamed one's longest silence."""
    stream: bool | None = None
    """Stream the answer (progress, no idle hang, no SDK 10-minute guard); None: where the call
    can be long (thinking or reasoning on, or a large output cap)."""
    max_concurrency: int = Field(default=DEFAULT_MAX_CONCURRENCY, ge=1)
    retry: RetryPolicy | None = None
    """A whole policy (tests inject one with a fake sleep); overrides the three numbers above."""
    http_client: Any = None
    """The SDK's HTTP client (proxies, tests on a mock transport): an ``httpx.Client`` or ``httpx2.Client``
    for ``openai``; for ``anthropic`` 2.x only an ``httpx2.Client``."""
    prices: PriceTable | None = None


def resolve_key(option: str | None, env_vars: tuple[str, ...], provider: str, required: bool) -> str | None:
    """The explicit key, else the first environment variable set; MissingApiKey when required."""
    if option:
        return option
    for name in env_vars:
        if os.environ.get(name):
            return os.environ[name]
    if required:
        raise MissingApiKey(env_vars[0], provider)
    return None


def env_or(option: str | None, env_var: str | None, default: str) -> str:
    if option:
        return option
    if env_var and os.environ.get(env_var):
        return os.environ[env_var]
    return default


class StreamWatch:
    """Follows a streamed answer: reports progress (at most every ``every_s``) and ends an
    attempt that runs past ``ends_at`` (a ``time.monotonic()`` instant)."""

    def __init__(self, progress: Progress | None, ends_at: float, every_s: float = 0.5):
        self.progress = progress
        self.ends_at = ends_at
        self.every_s = every_s
        self.started = time.monotonic()
        self.last = self.started
        self.thinking_chars = 0
        self.text_chars = 0

    def add(self, text: str = "", thinking: str = "") -> None:
        self.text_chars += len(text or "")
        self.thinking_chars += len(thinking or "")
        now = time.monotonic()
        if now >= self.ends_at:
            raise ProviderTimeout(f"the streamed answer ran past its time ({now - self.started:.0f} s)")
        if now - self.last >= self.every_s:
            self.report(now)

    def report(self, now: float | None = None) -> None:
        """Tell ``progress`` how far the answer is (also once at its end)."""
        now = time.monotonic() if now is None else now
        self.last = now
        if self.progress is not None:
            self.progress({"thinking_chars": self.thinking_chars, "text_chars": self.text_chars,
                           "elapsed_s": round(now - self.started, 1)})


class NetworkModel:
    """Base of the SDK-backed models. Subclasses set ``provider``, ``base_url``, ``sdk`` and
    implement ``_request``."""

    provider: str
    base_url: str
    sdk: ModuleType

    def __init__(self, spec: str, name: str, options: NetworkOptions):
        self.spec = spec
        self.name = name
        self.options = options
        self.retry = options.retry or RetryPolicy(max_attempts=options.max_attempts, deadline_s=options.deadline_s,
                                                  attempt_timeout_s=options.attempt_timeout_s)
        self.prices = options.prices or load_prices()

    def _limiter(self):
        return concurrency_limiter(self.provider, self.base_url, self.options.max_concurrency)

    def _request(self, messages: list[Message], tools: list[ToolSpec] | None, timeout_s: float,
                 watch: StreamWatch) -> ModelResponse:
        """One HTTP attempt; a streamed one feeds ``watch`` as the answer arrives."""
        raise NotImplementedError

    def complete(self, messages: list[Message], tools: list[ToolSpec] | None = None, *, deadline: float | None = None,
                 progress: Progress | None = None) -> ModelResponse:
        messages = [m if isinstance(m, Message) else Message.model_validate(m) for m in messages]
        messages = [m for m in messages if m.role != "exit"]
        tools = [t if isinstance(t, ToolSpec) else ToolSpec.model_validate(t) for t in tools] if tools else None
        limiter = self._limiter()
        started = time.monotonic()

        def attempt(timeout_s: float) -> ModelResponse:
            with limiter:
                limit = self.retry.deadline_s if deadline is None else min(self.retry.deadline_s, deadline - time.monotonic())
                watch = StreamWatch(progress, time.monotonic() + max(limit, 0.001))
                try:
                    return self._request(messages, tools, timeout_s, watch)
                except ProviderError:
                    raise
                except Exception as error:
                    raise classify_sdk_error(error, self.sdk, f"{self.provider} ({self.base_url})", timeout_s) from error

        if deadline is not None and time.monotonic() >= deadline:
            raise DeadlineExceeded("the run's wall-time budget was spent before the model call")
        response, attempts = self.retry.call(attempt, label=self.spec, deadline=deadline)
        response.attempts = attempts
        response.latency_s = time.monotonic() - started
        response.cost_usd = self.prices.cost_usd(response.usage, self.provider, response.model, self.name)
        if not response.usage.reported:
            response.cost_usd = None
            log.warning("the provider reported no token usage: this call's tokens and cost are unknown", spec=self.spec)
        log.info("model call", spec=self.spec, model=response.model, finish_reason=response.finish_reason,
                 input_tokens=response.usage.input_tokens, output_tokens=response.usage.output_tokens,
                 cached_input_tokens=response.usage.cached_input_tokens, cost_usd=response.cost_usd,
                 latency_s=round(response.latency_s, 3), attempts=attempts)
        return response

    @property
    def price_known(self) -> bool:
        """Whether the price table knows this model (else every cost is unknown)."""
        return self.prices.lookup(self.provider, self.name) is not None

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.spec!r}, base_url={self.base_url!r})"
