"""The provider protocol: messages in, one ``ModelResponse`` out, errors as small exceptions.

Every provider (OpenAI-compatible, Anthropic, scripted, replay) speaks these types; nothing
above ``agent.providers`` sees an SDK object.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

Role = Literal["system", "user", "assistant", "tool", "exit"]
FinishReason = Literal["stop", "length", "tool_calls", "content_filter", "error"]


class ToolCall(BaseModel):
    """One call of a tool the model asked for. ``raw_arguments`` keeps the model's text when it
    was not a JSON object (``arguments`` is then empty), so the caller can tell the model so."""

    id: str
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    raw_arguments: str | None = None


class Message(BaseModel):
    """One message of a conversation. ``tool_calls`` only on assistant messages, ``tool_call_id``
    only on tool results. ``thinking_blocks`` are opaque provider blocks (Anthropic thinking with
    its signature) that must go back verbatim with the assistant turn they came from; ``thinking``
    is the readable reasoning, kept for people (never sent back). ``refusal`` is a refusal the
    provider gave instead of an answer (OpenAI's ``message.refusal``). ``extra`` is what the agent
    records about a message (step, usage, verdict, ...), never sent to a model. An ``exit``
    message ends a finished run's conversation (mini-swe-agent's convention); it is never sent."""

    role: Role
    content: str = ""
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None
    thinking_blocks: list[dict[str, Any]] | None = None
    thinking: str | None = None
    refusal: str | None = None
    extra: dict[str, Any] = Field(default_factory=dict)


class ToolSpec(BaseModel):
    """A tool in neutral form: ``parameters`` is a JSON schema of the arguments object."""

    name: str
    description: str = ""
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})


class Usage(BaseModel):
    """Tokens of one call, 0 when the provider did not say.

    ``input_tokens`` counts every prompt token, cached ones included; ``cached_input_tokens``
    (read from a prompt cache) and ``cache_write_input_tokens`` (Anthropic cache creation) are
    parts of it. ``reasoning_tokens`` are part of ``output_tokens`` (and billed as output).
    ``reported`` is False when the provider sent no usage at all: the tokens, and so the cost, of
    that call are unknown (not zero)."""

    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int = 0
    reasoning_tokens: int = 0
    cache_write_input_tokens: int = 0
    reported: bool = True


class ModelResponse(BaseModel):
    """What one ``complete`` call returned. ``cost_usd`` is None when the cost is unknown (no
    price for the model, or no usage in the reply). ``latency_s`` is the whole call, retries and
    waits included; ``streamed`` whether it came as a stream."""

    model_config = ConfigDict(protected_namespaces=())

    text: str = ""
    tool_calls: list[ToolCall] = Field(default_factory=list)
    finish_reason: FinishReason = "stop"
    usage: Usage = Field(default_factory=Usage)
    cost_usd: float | None = None
    model: str = ""
    latency_s: float = 0.0
    attempts: int = 1
    thinking: str | None = None
    thinking_blocks: list[dict[str, Any]] | None = None
    refusal: str | None = None
    streamed: bool = False

    def to_message(self, **extra: Any) -> Message:
        """The assistant message to append to the conversation for the next turn."""
        return Message(role="assistant", content=self.text, tool_calls=list(self.tool_calls) or None,
                       thinking_blocks=self.thinking_blocks, thinking=self.thinking, refusal=self.refusal, extra=extra)


Progress = Callable[[dict[str, Any]], None]
"""Called while a streamed answer arrives: ``{"thinking_chars", "text_chars", "elapsed_s"}``."""


@runtime_checkable
class Model(Protocol):
    """A chat model. ``spec`` is the string it was made from (``openai:gpt-5``), ``name`` the
    model id (``gpt-5``).

    ``complete(messages, tools, deadline=..., progress=...)``: ``deadline`` is a
    ``time.monotonic()`` instant the call (retries included) must not outlive (DeadlineExceeded
    when it would); ``progress`` is called as a streamed answer arrives."""

    name: str
    spec: str

    def complete(self, messages: list[Message], tools: list[ToolSpec] | None = None, *, deadline: float | None = None,
                 progress: Progress | None = None) -> ModelResponse: ...


class ProviderError(Exception):
    """A model call failed; the message says why and, where it can, what to do."""

    def __init__(self, message: str, *, status_code: int | None = None, retry_after_s: float | None = None):
        super().__init__(message)
        self.message = message
        self.status_code = status_code
        self.retry_after_s = retry_after_s


class RateLimited(ProviderError):
    """HTTP 429: retried, after ``retry_after_s`` when the server said how long."""


class TransientError(ProviderError):
    """5xx, 529 overloaded, connection errors, timeouts: retried with backoff."""


class ProviderTimeout(TransientError):
    """An attempt timed out (no byte for the idle timeout, or the whole call too long): retried,
    but fewer times than other transient errors (a hanging endpoint tends to keep hanging)."""


class DeadlineExceeded(ProviderError):
    """The caller's deadline (the run's wall-time budget) came before the answer; not retried."""


class FatalProviderError(ProviderError):
    """Bad key, bad request, unknown model, a body that cannot be parsed: never retried."""


class MissingApiKey(FatalProviderError):
    """No API key: the message names the environment variable to set."""

    def __init__(self, env_var: str, provider: str):
        super().__init__(f"{provider} needs an API key: set the environment variable {env_var} "
                         f"(or pass api_key=...)")
        self.env_var = env_var


class RetriesExhausted(ProviderError):
    """Every allowed attempt failed (or the deadline passed); ``last_error`` is the last one."""

    def __init__(self, last_error: ProviderError, attempts: int, reason: str = ""):
        why = reason or f"after {attempts} attempt{'s' if attempts != 1 else ''}"
        super().__init__(f"model call failed {why}: {last_error.message}", status_code=last_error.status_code)
        self.last_error = last_error
        self.attempts = attempts


class ScriptExhausted(FatalProviderError):
    """A scripted or replayed model was asked for more responses than it has."""


class InvalidModelSpec(ValueError):
    """``make_model`` was given a spec or options it does not understand."""
