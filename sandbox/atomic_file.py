"""Writing a file so that a reader, or a crash, never sees half of it."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def _umask() -> int:
    """This process's umask, read without changing it (``/proc``), else by setting it back."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def atomic_write(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` so that a reader (or a crash) never sees half a file. The file
    gets the mode a plain ``open(path, "w")`` would (0666 less the umask); text that UTF-8 cannot
    carry (a lone surrogate from a model's JSON) is written as a backslash escape, never a crash."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", errors="backslashreplace") as handle:
            handle.write(text)
            handle.flush()
            os.fchmod(handle.fileno(), 0o666 & ~_umask())
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
