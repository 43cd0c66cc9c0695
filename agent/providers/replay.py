"""``replay:<trajectory.json>``: re-issues the assistant messages of a saved run, in order.

The trajectory is mini-swe-agent's format, ``{"messages": [{"role": ..., "content": ...}, ...],
"info": {...}}``. Content may be a string or a list of ``{"type": "text", "text": ...}`` parts;
tool calls may be in OpenAI's wire form or in ours (``{"id", "name", "arguments"}``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agent.providers.base import FatalProviderError, ModelResponse, ToolCall
from agent.providers.scripted import CannedModel


def message_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(part.get("text", "") if isinstance(part, dict) else str(part) for part in content)
    return str(content)


def replayed_call(call: dict[str, Any], index: int) -> ToolCall:
    function = call.get("function")
    if isinstance(function, dict):  # OpenAI wire form: arguments as a JSON string
        raw = function.get("arguments") or "{}"
        try:
            arguments = json.loads(raw) if isinstance(raw, str) else raw
        except json.JSONDecodeError:
            arguments = None
        name = function.get("name", "")
    else:
        raw, arguments, name = None, call.get("arguments", {}), call.get("name", "")
    if not isinstance(arguments, dict):
        return ToolCall(id=call.get("id") or f"call_{index}", name=name, arguments={}, raw_arguments=str(raw))
    return ToolCall(id=call.get("id") or f"call_{index}", name=name, arguments=arguments)


def load_trajectory(path: Path) -> list[ModelResponse]:
    try:
        data = json.loads(path.read_text())
        messages = data["messages"]
        assistant = [m for m in messages if isinstance(m, dict) and m.get("role") == "assistant"]
        responses = []
        for index, message in enumerate(assistant):
            calls = [replayed_call(c, j) for j, c in enumerate(message.get("tool_calls") or [])]
            responses.append(ModelResponse(
                text=message_text(message.get("content")), tool_calls=calls,
                finish_reason="tool_calls" if calls else "stop", cost_usd=0.0, model=f"replay:{path.name}",
                thinking_blocks=message.get("thinking_blocks") or None))
    except FileNotFoundError:
        raise FatalProviderError(f"no trajectory at {path}") from None
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
        raise FatalProviderError(f"{path} is not a trajectory (mini-swe-agent format: {{\"messages\": [...], "
                                 f"\"info\": {{...}}}}): {type(error).__name__}: {error}") from None
    if not responses:
        raise FatalProviderError(f"{path} holds no assistant message to replay")
    return responses


class ReplayModel(CannedModel):
    provider = "replay"

    def __init__(self, spec: str, path: str):
        trajectory = Path(path).expanduser()
        super().__init__(spec, path, load_trajectory(trajectory), str(trajectory))
