"""What a candidate's rank may not read even inside folders it may (site-packages, the home
folder): this project's packages, in place or installed, and the caches."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from kloop_runtime import settings

PROJECT_PACKAGES = ("sandbox", "problems", "kloop_runtime", "prompts", "agent")


def package_dir(name: str) -> Path | None:
    """Where the package ``name`` is imported from (never importing it)."""
    spec = importlib.util.find_spec(name)
    return Path(spec.origin).resolve().parent if spec and spec.origin else None


def hidden_paths() -> tuple[str, ...]:
    """This project's packages and the cache root. (The rest of the home folder is not readable anyway.)"""
    found = [str(p) for name in PROJECT_PACKAGES if (p := package_dir(name)) is not None]
    return tuple(found + [str(settings.cache_root())])
