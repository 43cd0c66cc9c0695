"""A run's folder and its trajectory, saved atomically after every step.

The trajectory is mini-swe-agent's format (``messages`` + ``info``, the last message
``role: "exit"``, ``trajectory_format: "mini-swe-agent-1"``), so its inspector opens it; our
per-step data rides in each message's ``extra``.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import time
from pathlib import Path
from typing import Any

from agent import __version__

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


class Trajectory:
    def __init__(self, folder: Path, info: dict[str, Any]):
        self.folder = folder
        self.path = folder / "trajectory.json"
        self.messages: list[dict[str, Any]] = []
        self.info: dict[str, Any] = {"kloop_version": __version__, **info}

    def add(self, role: str, content: str, **extra: Any) -> dict[str, Any]:
        message: dict[str, Any] = {"role": role, "content": content}
        if extra:
            message["extra"] = extra
        self.messages.append(message)
        return message

    def save(self) -> None:
        data = {"info": self.info, "messages": self.messages, "trajectory_format": FORMAT}
        atomic_write(self.path, json.dumps(data, indent=2, default=str))

    def write_file(self, relative: str, text: str) -> Path:
        """A file of the run (``steps/003/solution.py``, ``best/report.json``), written atomically."""
        path = self.folder / relative
        atomic_write(path, text)
        return path
