"""Model providers behind one small protocol (see ``base``); ``make_model`` builds one from a
spec string such as ``openai:gpt-5`` or ``anthropic:claude-sonnet-4-5``."""

from agent.providers.base import (DeadlineExceeded, FatalProviderError, FinishReason, InvalidModelSpec, Message, MissingApiKey, Model,
                                  ModelResponse, Progress, ProviderError, ProviderTimeout, RateLimited, RetriesExhausted, ScriptExhausted,
                                  ToolCall, ToolSpec, TransientError, Usage)
from agent.providers.baseline import BaselineUnavailable
from agent.providers.factory import PROVIDERS, make_model
from agent.providers.retry import RetryPolicy

__all__ = [
    "BaselineUnavailable", "DeadlineExceeded", "Progress", "ProviderTimeout", "FatalProviderError", "FinishReason", "InvalidModelSpec",
    "Message", "MissingApiKey", "Model", "ModelResponse",
    "PROVIDERS", "ProviderError", "RateLimited", "RetriesExhausted", "RetryPolicy", "ScriptExhausted", "ToolCall",
    "ToolSpec", "TransientError", "Usage", "make_model",
]
