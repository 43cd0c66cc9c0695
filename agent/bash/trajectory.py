"""A bash episode's trajectory in mini-swe-agent's 1.1 format (``*.traj.json``): OpenAI-style
messages (assistant ``tool_calls`` in wire form, ``tool`` results with their ``tool_call_id``),
each with its ``extra`` (the actions, each command's output as the model saw it, return code,
usage); ``info`` with ``exit_status`` and ``submission``; the last message ``role: "exit"``.
mini-swe-agent's inspector opens it; ``replay:`` replays it.

Only ``save`` differs from the loop's ``Trajectory`` (the run folder, step files and event log
are the same).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agent.providers import Message
from agent.trajectory import Trajectory, atomic_write

FORMAT = "mini-swe-agent-1.1"
FILENAME = "trajectory.traj.json"


def mini_message(message: Message) -> dict[str, Any]:
    record: dict[str, Any] = {"role": message.role, "content": message.content}
    if message.tool_calls:
        record["tool_calls"] = [{"id": call.id, "type": "function", "function": {
            "name": call.name, "arguments": call.raw_arguments if call.raw_arguments is not None else json.dumps(call.arguments)}}
            for call in message.tool_calls]
    if message.tool_call_id is not None:
        record["tool_call_id"] = message.tool_call_id
    if message.thinking:
        record["reasoning_content"] = message.thinking
    extra = dict(message.extra)
    if message.thinking_blocks:
        extra["thinking_blocks"] = message.thinking_blocks
    if extra:
        record["extra"] = extra
    return record


class MiniTrajectory(Trajectory):
    def __init__(self, folder: Path, info: dict[str, Any]):
        super().__init__(folder, info)
        self.path = folder / FILENAME

    def save(self, messages: list[Message]) -> None:
        data = {"info": self.info, "messages": [mini_message(m) for m in messages], "trajectory_format": FORMAT}
        atomic_write(self.path, json.dumps(data, indent=2, default=str))
