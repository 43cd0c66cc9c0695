"""Provider API keys are the server's: from its environment or a keys file, never from a client.

A keys file holds ``NAME=value`` lines (``OPENAI_API_KEY=sk-...``; ``#`` comments, optional
``export``); its variables join the server's environment, where the providers read them. The
sandboxes never get them (environment allow-lists), the API refuses options that would carry or
redirect them, and :func:`redactor` scrubs every record the store writes of any of their values.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Callable
from pathlib import Path

SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|AUTH", re.IGNORECASE)
LINE = re.compile(r"^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(.*?)\s*$")
MIN_SECRET_CHARS = 8
REDACTED = "[redacted]"


class KeysFileError(ValueError):
    pass


def load_keys_file(path: Path) -> dict[str, str]:
    """The variables of a keys file, put into this process's environment; refuses a file others may read."""
    try:
        mode = path.stat().st_mode
        text = path.read_text()
    except OSError as error:
        raise KeysFileError(f"cannot read the keys file {path}: {error}") from None
    if mode & (stat.S_IRGRP | stat.S_IROTH):
        raise KeysFileError(f"the keys file {path} is readable by other users: chmod 600 {path}")
    keys = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        match = LINE.match(line)
        if not match:
            raise KeysFileError(f"{path}:{number}: expected NAME=value")
        value = match.group(2)
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        keys[match.group(1)] = value
    os.environ.update(keys)
    return keys


def secret_values(environ: dict[str, str] | None = None) -> list[str]:
    """Values of the variables named like credentials (longest first)."""
    environ = dict(os.environ if environ is None else environ)
    values = {v for name, v in environ.items() if SECRET_NAME.search(name) and len(v) >= MIN_SECRET_CHARS}
    return sorted(values, key=len, reverse=True)


def redactor(environ: dict[str, str] | None = None) -> Callable[[str], str]:
    values = secret_values(environ)

    def redact(text: str) -> str:
        for value in values:
            if value in text:
                text = text.replace(value, REDACTED)
        return text

    return redact
