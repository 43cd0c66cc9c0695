"""A small cache of JSON values sealed with the host secret.

Written only by the harness parent, a process that never runs candidate code, in the cache dir,
which candidate ranks cannot read; read back only when the seal (an HMAC over key and value)
holds, so a file planted or changed by anything without the secret is a miss, never a value.
Nothing here is ever unpickled.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import tempfile
from pathlib import Path
from typing import Any

import structlog

log = structlog.get_logger(__name__)


def cache_key(**parts: Any) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:32]


class SealedCache:
    def __init__(self, folder: Path, secret: bytes):
        self.folder, self.secret = folder, secret

    def _seal(self, key: str, payload: str) -> str:
        return hmac.new(self.secret, f"{key}\n{payload}".encode(), hashlib.sha256).hexdigest()

    def load(self, key: str) -> Any | None:
        path = self.folder / f"{key}.json"
        try:
            entry = json.loads(path.read_text())
            payload, seal = entry["payload"], entry["seal"]
        except (OSError, ValueError, KeyError, TypeError):
            return None
        if not (isinstance(payload, str) and isinstance(seal, str) and hmac.compare_digest(seal, self._seal(key, payload))):
            log.warning("sealed cache entry failed its seal; ignored", path=str(path))
            return None
        return json.loads(payload)

    def store(self, key: str, value: Any) -> None:
        payload = json.dumps(value, sort_keys=True)
        self.folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.folder, prefix=f".{key}.")
        try:
            with os.fdopen(fd, "w") as handle:
                json.dump({"payload": payload, "seal": self._seal(key, payload)}, handle)
            os.replace(tmp, self.folder / f"{key}.json")
        except OSError as error:
            log.warning("could not write the cache entry", key=key, error=str(error))
            Path(tmp).unlink(missing_ok=True)
