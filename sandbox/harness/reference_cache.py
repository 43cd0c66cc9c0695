"""Reference outputs and timings, cached per (problem version, world, dtype, shape, seeds,
device, torch version). Kept in the cache dir, which candidate ranks cannot read."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import structlog

log = structlog.get_logger(__name__)

MAX_ENTRY_BYTES = int(float(os.environ.get("KLOOP_REFERENCE_CACHE_MAX_GB", "2")) * 2**30)


def cache_key(**parts: Any) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:24]


class ReferenceCache:
    def __init__(self, root: Path):
        self.root = root / "reference"

    def load(self, key: str, name: str) -> Any | None:
        import torch

        path = self.root / key / f"{name}.pt"
        if not path.exists():
            return None
        try:
            return torch.load(path, weights_only=False)
        except Exception as error:  # noqa: BLE001 - a corrupt entry is a miss
            log.warning("reference cache entry unreadable", path=str(path), error=str(error))
            return None

    def store(self, key: str, name: str, value: Any, nbytes: int = 0) -> None:
        import torch

        if nbytes > MAX_ENTRY_BYTES:
            log.info("reference outputs too large to cache", nbytes=nbytes)
            return
        folder = self.root / key
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=f"tmp_{name}_", suffix=".pt")
        os.close(fd)
        try:
            torch.save(value, tmp)
            os.replace(tmp, folder / f"{name}.pt")
        except Exception as error:  # noqa: BLE001 - caching is best effort
            log.warning("could not cache reference", key=key, error=f"{type(error).__name__}: {error}")
            Path(tmp).unlink(missing_ok=True)

    def clear(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)
