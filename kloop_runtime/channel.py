"""Where compile requests go: to the harness's compile server when running under the harness
(the trusted parent owns the cache, so a candidate can never plant a binary in it), otherwise
straight to the local builder."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, Callable

from kloop_runtime import build

_remote: Callable[[str, dict[str, Any]], tuple[bool, str, str]] | None = None
_lock = threading.Lock()


def install_remote(send_request: Callable[[str, dict[str, Any]], tuple[bool, str, str]]) -> None:
    """Route compiles through ``send_request(kind, payload) -> (ok, path, log)``."""
    global _remote
    _remote = send_request


def compile_artifact(kind: str, payload: dict[str, Any]) -> Path:
    if _remote is not None:
        with _lock:
            ok, path, log = _remote(kind, payload)
        if not ok:
            raise build.CompileError(f"{'nvcc' if kind == 'cubin' else 'extension build'} failed", log)
        return Path(path)
    if kind == "cubin":
        return build.build_cubin(**payload)
    return build.build_extension(**payload)
