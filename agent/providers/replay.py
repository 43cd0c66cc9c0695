"""``replay:<run folder or trajectory file>``: re-issues the assistant messages of a saved run,
in order.

The trajectory is mini-swe-agent's format, ``{"messages": [...], "info": {...}}`` (kloop's
``trajectory.traj.json``, an older ``trajectory.json``, or one mini-swe-agent wrote): content a
string or a list of ``{"type": "text", "text": ...}`` parts, tool calls in OpenAI's wire form or
in ours. ``recorded_problem`` is the problem the run was for (None when it does not say), so the
loop can warn when a replay is aimed at another one.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agent.providers.base import FatalProviderError, ModelResponse
from agent.providers.scripted import CannedModel


def read_trajectory(path: Path) -> tuple[list[ModelResponse], dict[str, Any]]:
    """The assistant answers of a trajectory, and its ``info``."""
    from agent.trajectory import message_from_record

    try:
        data = json.loads(path.read_text())
        records = data if isinstance(data, list) else data["messages"]
        info = data.get("info", {}) if isinstance(data, dict) else {}
        responses = []
        for record in records:
            if not (isinstance(record, dict) and record.get("role") == "assistant"):
                continue
            message = message_from_record(record)
            responses.append(ModelResponse(
                text=message.content, tool_calls=message.tool_calls or [], finish_reason="tool_calls" if message.tool_calls else "stop",
                cost_usd=0.0, model=f"replay:{path.name}", thinking=message.thinking, thinking_blocks=message.thinking_blocks,
                refusal=record.get("refusal")))
    except FileNotFoundError:
        raise FatalProviderError(f"no trajectory at {path}") from None
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
        raise FatalProviderError(f"{path} is not a trajectory (mini-swe-agent format: {{\"messages\": [...], "
                                 f"\"info\": {{...}}}}): {type(error).__name__}: {error}") from None
    if not responses:
        raise FatalProviderError(f"{path} holds no assistant message to replay")
    return responses, info if isinstance(info, dict) else {}


class ReplayModel(CannedModel):
    provider = "replay"

    def __init__(self, spec: str, path: str):
        from agent.trajectory import find_trajectory

        trajectory = find_trajectory(Path(path).expanduser())
        responses, info = read_trajectory(trajectory)
        super().__init__(spec, path, responses, str(trajectory))
        config = info.get("config") if isinstance(info.get("config"), dict) else {}
        self.recorded_problem: str | None = config.get("problem")

    def exhausted_message(self) -> str:
        count = len(self.responses)
        return (f"the replay is over: {self.source} holds {count} answer{'s' if count != 1 else ''} and all were replayed "
                f"(run with --steps {count} to replay it exactly)")
