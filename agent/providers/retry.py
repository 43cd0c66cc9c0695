"""The one retry policy of every network provider, and the per-endpoint concurrency cap.

SDK retries are off; errors are classified here into rate limits (429), transient failures
(5xx, 529 overloaded, 408/409, connection errors, timeouts) and fatal ones (400, 401, 403,
404, bodies that cannot be parsed). Rate limits and transient failures are retried, after the
server's ``Retry-After`` (or ``retry-after-ms``) when it sent one, otherwise after exponential
backoff with jitter, up to ``max_attempts`` tries and a total deadline.
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from email.utils import parsedate_to_datetime
from types import ModuleType
from typing import Any, TypeVar

import structlog
import tenacity

from agent.providers.base import (DeadlineExceeded, FatalProviderError, ProviderError, ProviderTimeout, RateLimited,
                                  RetriesExhausted, TransientError)

log = structlog.get_logger(__name__)

T = TypeVar("T")

DEFAULT_MAX_CONCURRENCY = 8
STATUS_HINTS = {
    400: "the request was rejected; check the model's options (max tokens, reasoning effort, tools)",
    401: "the API key was refused; check it",
    402: "the account has no credit left",
    403: "the API key may not use this model or endpoint",
    404: "check the model name and the base URL",
    413: "the prompt is too large for this endpoint",
    422: "the request was rejected; check the model's options",
}


def _header(headers: Mapping[str, str] | None, name: str) -> str | None:
    if not headers:
        return None
    value = headers.get(name)
    if value is None:
        value = next((v for k, v in headers.items() if k.lower() == name), None)
    return value


def parse_retry_after(headers: Mapping[str, str] | None, now: datetime | None = None) -> float | None:
    """Seconds the server asked us to wait: ``retry-after-ms``, else ``Retry-After`` as seconds
    or as an HTTP date. None when absent or unreadable."""
    millis = _header(headers, "retry-after-ms")
    if millis:
        try:
            return max(float(millis) / 1000.0, 0.0)
        except ValueError:
            pass
    value = _header(headers, "retry-after")
    if not value:
        return None
    try:
        return max(float(value), 0.0)
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return max((when - (now or datetime.now(timezone.utc))).total_seconds(), 0.0)


def error_for_status(status: int, detail: str, headers: Mapping[str, str] | None = None, where: str = "") -> ProviderError:
    """The ProviderError for an HTTP error status (with the server's wait, if any)."""
    retry_after = parse_retry_after(headers)
    origin = f" from {where}" if where else ""
    if status == 429:
        return RateLimited(f"rate limited (HTTP 429){origin}: {detail}", status_code=status, retry_after_s=retry_after)
    should_retry = (_header(headers, "x-should-retry") or "").lower()
    if (status in (408, 409) or status >= 500 or should_retry == "true") and should_retry != "false":
        return TransientError(f"HTTP {status}{origin}: {detail}", status_code=status, retry_after_s=retry_after)
    hint = STATUS_HINTS.get(status, "the request was refused")
    return FatalProviderError(f"HTTP {status}{origin}: {detail} ({hint})", status_code=status)


def classify_sdk_error(error: BaseException, sdk: ModuleType, where: str, timeout_s: float | None = None) -> ProviderError:
    """Map an exception of the ``openai`` or ``anthropic`` SDK (they share the class names) or
    of their HTTP layer to a ProviderError."""
    if isinstance(error, ProviderError):
        return error
    if isinstance(error, sdk.APITimeoutError) or isinstance(error, TimeoutError):
        after = f" after {timeout_s:g}s" if timeout_s else ""
        return ProviderTimeout(f"request to {where} timed out{after}")
    if isinstance(error, sdk.APIConnectionError) or isinstance(error, ConnectionError):
        cause = error.__cause__ or error.__context__
        return TransientError(f"could not reach {where}: {cause or error}")
    if isinstance(error, sdk.APIStatusError):
        return error_for_status(error.status_code, _status_detail(error), error.response.headers, where)
    if isinstance(error, (sdk.APIResponseValidationError, json.JSONDecodeError, UnicodeDecodeError)):
        return FatalProviderError(f"malformed response from {where}: the body could not be parsed ({error})")
    if isinstance(error, sdk.APIError):
        return FatalProviderError(f"{where}: {error}")
    raise error


def _status_detail(error: Any) -> str:
    body = getattr(error, "body", None)
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and inner.get("message"):
            return str(inner["message"])
    if isinstance(body, str) and body.strip():
        return body.strip()[:500]
    return str(getattr(error, "message", None) or error)


@dataclass
class RetryPolicy:
    """How hard to try. ``sleep`` and ``clock`` are injectable so tests never wait for real."""

    max_attempts: int = 6
    deadline_s: float = 1800.0
    attempt_timeout_s: float = 300.0
    """A non-streamed attempt's whole time; a streamed one's longest silence (no byte)."""
    max_timeout_attempts: int = 2
    """Attempts that may time out before the call gives up (a hanging endpoint keeps hanging)."""
    backoff_initial_s: float = 2.0
    backoff_max_s: float = 60.0
    max_retry_after_s: float = 300.0
    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.monotonic
    rng: random.Random = field(default_factory=random.Random)

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError(f"max_attempts must be at least 1, not {self.max_attempts}")
        if self.attempt_timeout_s <= 0 or self.deadline_s <= 0:
            raise ValueError("attempt_timeout_s and deadline_s must be positive")

    def backoff_s(self, attempt_number: int) -> float:
        """Exponential backoff with jitter after the ``attempt_number``-th failure."""
        base = min(self.backoff_max_s, self.backoff_initial_s * 2 ** (attempt_number - 1))
        return base * (0.5 + 0.5 * self.rng.random())

    def wait_s(self, error: BaseException | None, attempt_number: int) -> float:
        retry_after = getattr(error, "retry_after_s", None)
        if retry_after is not None:
            return min(retry_after, self.max_retry_after_s)
        return self.backoff_s(attempt_number)

    def call(self, attempt: Callable[[float], T], label: str = "", deadline: float | None = None) -> tuple[T, int]:
        """Run ``attempt(timeout_s)`` until it returns; returns (result, attempts it took).
        ``attempt`` must raise ProviderErrors; RateLimited and TransientError are retried, any
        other exception propagates at once. Raises RetriesExhausted when the budget is spent, and
        DeadlineExceeded when ``deadline`` (a ``time.monotonic()`` instant: the run's wall-time
        budget) comes first: no attempt and no wait runs past it."""
        start = self.clock()
        end = start + self.deadline_s
        run_end = None if deadline is None else start + (deadline - time.monotonic())
        attempts = 0
        timeouts = 0
        run_deadline_stopped = False

        def out_of_time(error: BaseException | None = None) -> DeadlineExceeded:
            why = f": {error}" if error else ""
            return DeadlineExceeded(f"the run's wall-time budget ran out during the model call{why}")

        def one_try() -> T:
            nonlocal attempts, timeouts
            now = self.clock()
            if run_end is not None and now >= run_end:
                raise out_of_time()
            attempts += 1
            limit = min(end, run_end) if run_end is not None else end
            try:
                return attempt(max(min(self.attempt_timeout_s, limit - now), 0.001))
            except ProviderTimeout as error:
                timeouts += 1
                if run_end is not None and self.clock() >= run_end - 0.05:
                    raise out_of_time(error) from error
                raise

        def wait(state: tenacity.RetryCallState) -> float:
            return self.wait_s(state.outcome.exception() if state.outcome else None, state.attempt_number)

        def stop(state: tenacity.RetryCallState) -> bool:
            if state.attempt_number >= self.max_attempts or timeouts >= self.max_timeout_attempts:
                return True
            nonlocal run_deadline_stopped
            after_wait = self.clock() + (state.upcoming_sleep or 0.0)
            run_deadline_stopped = run_end is not None and after_wait >= run_end and after_wait < end
            return after_wait >= end or run_deadline_stopped

        def before_sleep(state: tenacity.RetryCallState) -> None:
            error = state.outcome.exception() if state.outcome else None
            log.warning("model call failed, retrying", label=label, attempt=state.attempt_number,
                        wait_s=round(state.upcoming_sleep, 3), error=str(error))

        retrying = tenacity.Retrying(
            stop=stop, wait=wait, sleep=self.sleep, before_sleep=before_sleep,
            retry=tenacity.retry_if_exception_type((RateLimited, TransientError)),
        )
        try:
            return retrying(one_try), attempts
        except tenacity.RetryError as exhausted:
            last = exhausted.last_attempt.exception()
            assert isinstance(last, ProviderError)
            if run_deadline_stopped:
                raise out_of_time(last) from last
            reason = ""
            if timeouts >= self.max_timeout_attempts and attempts < self.max_attempts:
                reason = f"after {attempts} attempt{'s' if attempts != 1 else ''}, {timeouts} of them timed out"
            elif attempts < self.max_attempts:
                reason = (f"after {attempts} attempt{'s' if attempts != 1 else ''}: the next try would pass the "
                          f"{self.deadline_s:g}s deadline")
            log.error("model call gave up", label=label, attempts=attempts, error=str(last))
            raise RetriesExhausted(last, attempts, reason) from last


_limiters: dict[tuple[str, str], tuple[threading.BoundedSemaphore, int]] = {}
_limiters_lock = threading.Lock()


def concurrency_limiter(provider: str, base_url: str, limit: int = DEFAULT_MAX_CONCURRENCY) -> threading.BoundedSemaphore:
    """The semaphore shared by every model of one provider and base URL (so batch runs cannot
    flood an endpoint). The first model made for an endpoint sets its limit."""
    if limit < 1:
        raise ValueError(f"max_concurrency must be at least 1, not {limit}")
    key = (provider, base_url.rstrip("/"))
    with _limiters_lock:
        if key not in _limiters:
            _limiters[key] = (threading.BoundedSemaphore(limit), limit)
        semaphore, first_limit = _limiters[key]
    if first_limit != limit:
        log.warning("endpoint already has a concurrency cap; keeping it", provider=provider, base_url=base_url,
                    max_concurrency=first_limit, asked=limit)
    return semaphore
