"""A run's folder: its trajectory, saved atomically after every step, its step files and its
event log.

The trajectory is mini-swe-agent's format ``mini-swe-agent-1.1`` (``messages`` + ``info``, the
last message ``role: "exit"`` with ``extra.exit_status``/``submission`` and, when the run died of
an exception, ``exception_str`` and ``traceback``), written as ``trajectory.traj.json`` so that
``mini-extra inspector RUNS_DIR`` finds it. Messages are in OpenAI's chat shape as mini-swe-agent
writes them: ``tool_calls`` in OpenAI's wire form, the readable thinking as ``reasoning_content``,
our per-message data (step, usage, ``cost``, ``timestamp``, verdict, ...) in ``extra``.
``message_record`` and ``message_from_record`` convert between that and :class:`Message`.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog

from agent import __version__
from agent.providers.base import Message, ToolCall
from sandbox.atomic_file import atomic_write

if TYPE_CHECKING:
    from agent.run_config import RunConfig

FORMAT = "mini-swe-agent-1.1"
TRAJECTORY_NAME = "trajectory.traj.json"
TRAJECTORY_NAMES = (TRAJECTORY_NAME, "trajectory.json")  # the second: runs written before the 1.1 format


def new_run_folder(out: Path, problem: str, model: str) -> Path:
    """``out/<time>_<problem>_<model>[_N]``, made here; never one another process made too."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", f"{problem}_{model}").strip("-")[:80]
    out.mkdir(parents=True, exist_ok=True)
    for suffix in range(1, 10_000):
        folder = out / (f"{stamp}_{slug}" if suffix == 1 else f"{stamp}_{slug}_{suffix}")
        try:
            folder.mkdir(exist_ok=False)
            return folder
        except FileExistsError:
            continue
    raise FileExistsError(f"no free run folder name under {out} for {stamp}_{slug}")


def start_run(config: RunConfig, problem_name: str, folder: Path | None = None, info: dict[str, Any] | None = None) -> Trajectory:
    """A run's folder (``folder``, made if missing, or a new one under ``config.out``) with its
    trajectory saved at once (exit status ``Started``) and its ``config.json``: a run folder with
    a config always has a trajectory, however the run ends."""
    if folder is not None:
        folder.mkdir(parents=True, exist_ok=True)
    else:
        folder = new_run_folder(config.out, problem_name, config.model)
    trajectory = Trajectory(folder, info={"config": config.model_dump(mode="json"), **(info or {})})
    trajectory.info.update(exit_status="Started")
    trajectory.save([])
    trajectory.write_file("config.json", config.model_dump_json(indent=2))
    return trajectory


def find_trajectory(path: Path) -> Path:
    """The trajectory file of a run folder (``path/trajectory.traj.json`` when the folder holds
    none yet), or ``path`` itself when it is not a folder."""
    if path.is_dir():
        for name in TRAJECTORY_NAMES:
            if (path / name).is_file():
                return path / name
        found = sorted(path.glob("*.traj.json"))
        return found[0] if found else path / TRAJECTORY_NAME
    return path


def wire_tool_call(call: ToolCall) -> dict[str, Any]:
    arguments = call.raw_arguments if call.raw_arguments is not None else json.dumps(call.arguments)
    return {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": arguments}}


def message_record(message: Message) -> dict[str, Any]:
    """A message as the trajectory keeps it (mini-swe-agent's shape: ``reasoning_content``,
    OpenAI wire ``tool_calls``, everything else of ours in ``extra``)."""
    record: dict[str, Any] = {"role": message.role, "content": message.content}
    if message.thinking is not None:
        record["reasoning_content"] = message.thinking
    if message.tool_calls:
        record["tool_calls"] = [wire_tool_call(call) for call in message.tool_calls]
    if message.tool_call_id is not None:
        record["tool_call_id"] = message.tool_call_id
    if message.refusal is not None:
        record["refusal"] = message.refusal
    if message.thinking_blocks:
        record["thinking_blocks"] = message.thinking_blocks
    if message.extra:
        record["extra"] = message.extra
    return record


def _tool_call(call: dict[str, Any], index: int) -> ToolCall:
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
    call_id = call.get("id") or f"call_{index}"
    if not isinstance(arguments, dict):
        return ToolCall(id=call_id, name=name, arguments={}, raw_arguments=str(raw))
    return ToolCall(id=call_id, name=name, arguments=arguments)


def content_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(part.get("text", "") if isinstance(part, dict) else str(part) for part in content)
    return str(content)


def message_from_record(record: dict[str, Any]) -> Message:
    """The Message of a trajectory record: ours (1.1 or the older ``thinking``/neutral tool calls)
    or mini-swe-agent's own."""
    calls = [_tool_call(c, j) for j, c in enumerate(record.get("tool_calls") or [])]
    role = record.get("role", "user")
    return Message(role=role if role in ("system", "user", "assistant", "tool", "exit") else "user",
                   content=content_text(record.get("content")), tool_calls=calls or None,
                   tool_call_id=record.get("tool_call_id"), thinking_blocks=record.get("thinking_blocks") or None,
                   thinking=record.get("reasoning_content") or record.get("thinking"), refusal=record.get("refusal"),
                   extra=record.get("extra") or {})


class Trajectory:
    """A run folder's trajectory (``trajectory.traj.json``), step files and event log; the loop
    and bash mode write the same format through it."""

    def __init__(self, folder: Path, info: dict[str, Any]):
        self.folder = folder
        self.path = folder / TRAJECTORY_NAME
        self.info: dict[str, Any] = {"kloop_version": __version__, "exit_status": "", "submission": "",
                                     "model_stats": {"instance_cost": 0.0, "api_calls": 0}, **info}

    def save(self, messages: list[Message]) -> None:
        data = {"info": self.info, "messages": [message_record(m) for m in messages], "trajectory_format": FORMAT}
        atomic_write(self.path, json.dumps(data, indent=2, default=str))

    def save_final(self, messages: list[Message], *, exit_status: str, submission: str, message: str,
                   wall_s: float | None = None, **stats: Any) -> None:
        """The run's end: ``info`` with the exit and ``stats``, the trajectory saved, and
        ``summary.json`` (exit status, message, wall time, stats)."""
        self.info.update(exit_status=exit_status, submission=submission, **stats)
        self.save(messages)
        summary: dict[str, Any] = {"exit_status": exit_status, "message": message}
        if wall_s is not None:
            summary["wall_s"] = round(wall_s, 2)
        self.write_file("summary.json", json.dumps({**summary, **stats}, indent=2, default=str))

    def write_file(self, relative: str, text: str) -> Path:
        """A file of the run (``steps/003/solution.py``, ``best/report.json``), written atomically."""
        path = self.folder / relative
        atomic_write(path, text)
        return path

    @contextmanager
    def event_log(self, **bound: Any) -> Iterator[Any]:
        """A structlog logger writing JSON lines to ``events.jsonl`` (appended; closed on exit).
        Every level is written, whatever filter the process configured for its own logging."""
        with (self.folder / "events.jsonl").open("a", buffering=1, encoding="utf-8", errors="backslashreplace") as events:
            yield structlog.wrap_logger(
                structlog.WriteLogger(events), wrapper_class=structlog.make_filtering_bound_logger(logging.DEBUG),
                processors=[structlog.processors.TimeStamper(fmt="iso"), structlog.processors.add_log_level,
                            structlog.processors.JSONRenderer()],
            ).bind(**bound)
