"""The commands in a model's answer: ``bash`` tool calls, or one fenced ```bash block for
models without tools (both accepted whatever the episode's preference)."""

from __future__ import annotations

import re

from pydantic import BaseModel

from agent.control import FormatError
from agent.providers import ModelResponse, ToolSpec
from prompts import render

BASH_BLOCK = re.compile(r"^[ \t]*```[ \t]*(?:bash|sh|shell)[ \t]*\n(.*?)^[ \t]*```[ \t]*$", re.S | re.M)
BASH_TOOL = ToolSpec(
    name="bash",
    description="Run one bash command in your sandbox's work folder and get its output (stdout and stderr) and exit code. "
                "kloop's commands check, bench, profile and submit are on the PATH.",
    parameters={"type": "object", "properties": {"command": {"type": "string", "description": "the bash command to run"}},
                "required": ["command"]},
)


class Action(BaseModel):
    """One command to run; ``tool_call_id`` when it came from a tool call (its output goes back as that call's result)."""

    command: str
    tool_call_id: str | None = None


def parse_actions(response: ModelResponse, tools: bool) -> list[Action]:
    """The commands to run, in order. Raises FormatError (with feedback for the model) when
    there is none, a tool call is malformed, or a text answer holds other than one bash block."""
    truncated = response.finish_reason == "length"
    if response.tool_calls:
        actions = []
        for call in response.tool_calls:
            command = call.arguments.get("command")
            if call.name != "bash":
                raise _error(f"There is no tool {call.name!r}; the only tool is `bash`.", tools, truncated)
            if not isinstance(command, str) or not command.strip():
                raw = f" (its arguments were {call.raw_arguments[:200]!r})" if call.raw_arguments else ""
                raise _error(f"A bash tool call needs a non-empty string argument `command`{raw}.", tools, truncated)
            actions.append(Action(command=command, tool_call_id=call.id))
        return actions
    blocks = [block.strip() for block in BASH_BLOCK.findall(response.text)]
    blocks = [block for block in blocks if block]
    if len(blocks) == 1:
        return [Action(command=blocks[0])]
    found = "no command" if not blocks else f"{len(blocks)} ```bash blocks"
    raise _error(f"Your answer holds {found}; it must hold exactly one.", tools, truncated)


def _error(error: str, tools: bool, truncated: bool) -> FormatError:
    return FormatError(render("bash/format_error", error=error, tools=tools, truncated=truncated))
