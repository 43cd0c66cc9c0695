"""Deterministic offline models: ``scripted:<name>`` plays ``agent/scripts/<name>.yaml``.

A script is a YAML list of responses, each a string (the text) or a mapping::

    - text: "Here is my first try: ..."
    - text: "Let me look around."
      tool_calls:
        - name: bash
          arguments: {command: "ls"}
"""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path
from typing import Any

import structlog
import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from agent.providers.base import (FatalProviderError, FinishReason, Message, ModelResponse, ScriptExhausted, ToolCall,
                                  ToolSpec, Usage)

log = structlog.get_logger(__name__)

SCRIPTS_DIR = Path(__file__).resolve().parents[1] / "scripts"
SCRIPT_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")


class ScriptedToolCall(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str | None = None
    name: str
    arguments: dict[str, Any] = {}


class ScriptedResponse(BaseModel):
    model_config = ConfigDict(extra="forbid")

    text: str = ""
    tool_calls: list[ScriptedToolCall] = []
    finish_reason: FinishReason | None = None
    usage: Usage | None = None


class CannedModel:
    """Returns prepared responses in order (thread-safe); ScriptExhausted when none is left.
    ``received`` keeps the messages of every call, for tests."""

    provider = "canned"

    def __init__(self, spec: str, name: str, responses: list[ModelResponse], source: str):
        self.spec = spec
        self.name = name
        self.responses = responses
        self.source = source
        self.received: list[list[Message]] = []
        self._next = 0
        self._lock = threading.Lock()

    @property
    def remaining(self) -> int:
        return len(self.responses) - self._next

    def exhausted_message(self) -> str:
        return (f"{self.spec} has no response left: all {len(self.responses)} in {self.source} were used; add responses "
                f"there or lower the step budget")

    def complete(self, messages: list[Message], tools: list[ToolSpec] | None = None, *, deadline: float | None = None,
                 progress: Any = None) -> ModelResponse:
        started = time.monotonic()
        with self._lock:
            if self._next >= len(self.responses):
                raise ScriptExhausted(self.exhausted_message())
            response = self.responses[self._next].model_copy(deep=True)
            self._next += 1
            self.received.append([m if isinstance(m, Message) else Message.model_validate(m) for m in messages])
        response.latency_s = time.monotonic() - started
        log.debug("canned response", spec=self.spec, index=self._next, left=self.remaining)
        return response


def script_path(name: str) -> Path:
    """``agent/scripts/<name>.yaml``, or ``name`` itself when it is a path to a YAML file."""
    if name.endswith((".yaml", ".yml")) or "/" in name:
        return Path(name).expanduser()
    if not SCRIPT_NAME.match(name):
        raise FatalProviderError(f"bad script name {name!r}: use letters, digits, '_', '-', '.'")
    return SCRIPTS_DIR / f"{name}.yaml"


def load_script(name: str) -> list[ModelResponse]:
    path = script_path(name)
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in SCRIPTS_DIR.glob("*.yaml"))) or "none"
        raise FatalProviderError(f"no script {name!r}: {path} does not exist (scripts shipped: {known})")
    try:
        data = yaml.safe_load(path.read_text())
        if not isinstance(data, list) or not data:
            raise ValueError("a script is a non-empty YAML list of responses")
        items = [parse_item(item, index) for index, item in enumerate(data, start=1)]
    except (OSError, yaml.YAMLError, ValueError) as error:
        raise FatalProviderError(f"cannot load the script {path}: {error}") from None
    return [to_response(item, index, name) for index, item in enumerate(items)]


def parse_item(item: Any, index: int) -> ScriptedResponse:
    if isinstance(item, str):
        return ScriptedResponse(text=item)
    try:
        return ScriptedResponse.model_validate(item)
    except ValidationError as error:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'item'}: {e['msg']}" for e in error.errors())
        raise ValueError(f"response {index}: {problems}") from None


def to_response(item: ScriptedResponse, index: int, model: str) -> ModelResponse:
    calls = [ToolCall(id=c.id or f"call_{index}_{j}", name=c.name, arguments=c.arguments)
             for j, c in enumerate(item.tool_calls)]
    finish = item.finish_reason or ("tool_calls" if calls else "stop")
    return ModelResponse(text=item.text, tool_calls=calls, finish_reason=finish, usage=item.usage or Usage(),
                         cost_usd=0.0, model=model, attempts=1)


class ScriptedModel(CannedModel):
    provider = "scripted"

    def __init__(self, spec: str, name: str):
        super().__init__(spec, name, load_script(name), str(script_path(name)))
