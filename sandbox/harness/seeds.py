"""Trial seeds: public numbers (reported, reproducible) mixed with a per-host secret, so a
solution cannot be tuned to, or hard-code, the inputs it will be judged on."""

from __future__ import annotations

import hashlib
import os
import secrets
import tempfile
from pathlib import Path


def host_secret(cache_dir: Path) -> bytes:
    """A random secret kept in the (candidate-unreadable) cache dir, created on first use."""
    path = cache_dir / "secret"
    if path.exists():
        return path.read_bytes()
    cache_dir.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=cache_dir, prefix=".secret-")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(secrets.token_bytes(32))
        try:
            os.link(tmp, path)  # atomic; the first writer wins
        except FileExistsError:
            pass
    finally:
        os.unlink(tmp)
    return path.read_bytes()


def mixed_seed(public: int, secret: bytes) -> int:
    digest = hashlib.sha256(secret + public.to_bytes(8, "little", signed=True)).digest()
    return int.from_bytes(digest[:8], "little") & (2**62 - 1)
