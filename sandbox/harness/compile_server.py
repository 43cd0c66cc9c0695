"""The harness parent compiles on behalf of the ranks: one build per distinct request, results
cached where only trusted code writes."""

from __future__ import annotations

import threading
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import structlog

from sandbox.harness.protocol import CompileReply, CompileRequest
from kloop_runtime import build

log = structlog.get_logger(__name__)

_CUBIN_FIELDS = {"source": str, "options": tuple, "arch": str}
_EXTENSION_FIELDS = {
    "name": str, "cuda_sources": str, "cpp_sources": str, "functions": (tuple, type(None)), "extra_cflags": tuple,
    "extra_cuda_cflags": tuple, "extra_ldflags": tuple, "extra_include_paths": tuple, "arch": str,
}
MAX_SOURCE_CHARS = 2_000_000


def _validated(kind: str, payload: Any) -> dict[str, Any]:
    fields = _CUBIN_FIELDS if kind == "cubin" else _EXTENSION_FIELDS if kind == "extension" else None
    if fields is None or not isinstance(payload, dict) or set(payload) != set(fields):
        raise build.CompileError(f"malformed compile request of kind {kind!r}")
    for name, types in fields.items():
        value = payload[name]
        if not isinstance(value, types):
            raise build.CompileError(f"compile request field {name} has type {type(value).__name__}")
        if isinstance(value, tuple) and not all(isinstance(v, str) for v in value):
            raise build.CompileError(f"compile request field {name} must hold strings")
        if isinstance(value, str) and len(value) > MAX_SOURCE_CHARS:
            raise build.CompileError(f"compile request field {name} is longer than {MAX_SOURCE_CHARS} characters")
    return payload


class CompileServer:
    def __init__(self, cache_dir: Path, workers: int = 4):
        self.cache_dir = cache_dir
        cache_dir.mkdir(parents=True, exist_ok=True)  # before ranks are confined: Landlock rules need the folder to exist
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="compile")
        self._futures: dict[tuple, Future] = {}
        self._lock = threading.Lock()
        self.requests = 0
        self.failed = 0  # builds that failed

    @property
    def distinct(self) -> int:
        """Distinct requests so far: one build each (requests are never forgotten)."""
        return len(self._futures)

    def _count_failure(self) -> None:
        with self._lock:  # builds run on several pool threads
            self.failed += 1

    def _build(self, kind: str, payload: dict[str, Any]) -> CompileReply:
        try:
            payload = _validated(kind, payload)
            builder = build.build_cubin if kind == "cubin" else build.build_extension
            path = builder(**payload, cache_dir=self.cache_dir)
            return CompileReply(request_id=-1, ok=True, path=str(path))
        except build.CompileError as error:
            self._count_failure()
            return CompileReply(request_id=-1, ok=False, log=error.log)
        except Exception as error:  # noqa: BLE001 - a build tool failing is reported, never fatal
            log.exception("compile failed unexpectedly")
            self._count_failure()
            return CompileReply(request_id=-1, ok=False, log=f"{type(error).__name__}: {error}")

    def submit(self, request: CompileRequest) -> Future:
        key = (request.kind, repr(sorted(request.payload.items())) if isinstance(request.payload, dict) else repr(request.payload))
        with self._lock:
            self.requests += 1
            future = self._futures.get(key)
            if future is None:
                future = self._pool.submit(self._build, request.kind, request.payload)
                self._futures[key] = future
        return future

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
