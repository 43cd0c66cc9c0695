"""A run's folder: its trajectory, saved atomically after every step, its step files and its
event log.

The trajectory is mini-swe-agent's format (``messages`` + ``info``, the last message
``role: "exit"``, ``trajectory_format: "mini-swe-agent-1"``), so its inspector opens it; each
message is a serialised :class:`agent.providers.Message`, our per-step data in its ``extra``.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import structlog

from agent import __version__
from agent.providers import Message

FORMAT = "mini-swe-agent-1"


def atomic_write(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` so that a reader (or a crash) never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def new_run_folder(out: Path, problem: str, model: str) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", f"{problem}_{model}").strip("-")[:80]
    folder = out / f"{stamp}_{slug}"
    suffix = 1
    while folder.exists():
        suffix += 1
        folder = out / f"{stamp}_{slug}_{suffix}"
    folder.mkdir(parents=True)
    return folder


def message_record(message: Message) -> dict[str, Any]:
    """A message as the trajectory keeps it: its fields that are set, ``extra`` when there is one."""
    return message.model_dump(mode="json", exclude_none=True, exclude={"extra"} if not message.extra else None)


class Trajectory:
    def __init__(self, folder: Path, info: dict[str, Any]):
        self.folder = folder
        self.path = folder / "trajectory.json"
        self.info: dict[str, Any] = {"kloop_version": __version__, **info}

    def save(self, messages: list[Message]) -> None:
        data = {"info": self.info, "messages": [message_record(m) for m in messages], "trajectory_format": FORMAT}
        atomic_write(self.path, json.dumps(data, indent=2, default=str))

    def write_file(self, relative: str, text: str) -> Path:
        """A file of the run (``steps/003/solution.py``, ``best/report.json``), written atomically."""
        path = self.folder / relative
        atomic_write(path, text)
        return path

    @contextmanager
    def event_log(self, **bound: Any) -> Iterator[Any]:
        """A structlog logger writing JSON lines to ``events.jsonl`` (appended; closed on exit)."""
        with (self.folder / "events.jsonl").open("a", buffering=1) as events:
            yield structlog.wrap_logger(structlog.WriteLogger(events), processors=[
                structlog.processors.TimeStamper(fmt="iso"), structlog.processors.add_log_level, structlog.processors.JSONRenderer(),
            ]).bind(**bound)
