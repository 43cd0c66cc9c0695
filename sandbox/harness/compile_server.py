"""The harness parent compiles on behalf of the ranks.

A rank sends the source and options as plain data; the parent checks them, refuses NVLink
multicast before anything is built (in the source and, for raw kernels, in the preprocessed
source, so macros cannot assemble it), builds once per distinct request with confined compilers
into the compile cache (written only here, each artifact sealed with the host secret's HMAC and
checked before reuse), and hands the rank a private copy in its own work dir: a candidate never
reads the cache, so it cannot load what other solutions (or the oracles) compiled.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

from kloop_runtime import build
from kloop_runtime.settings import compile_cache_max_bytes
from sandbox.harness.confined_exec import confined_command
from sandbox.harness.static_checks import MULTICAST, MULTICAST_OFF

log = structlog.get_logger(__name__)

_CUBIN_FIELDS = {"source": str, "options": list, "arch": str}
_EXTENSION_FIELDS = {
    "name": str, "cuda_sources": str, "cpp_sources": str, "functions": (list, type(None)), "extra_cflags": list,
    "extra_cuda_cflags": list, "extra_ldflags": list, "extra_include_paths": list, "arch": str,
}
MAX_SOURCE_CHARS = 2_000_000
MAX_BUILDS = 16  # distinct build requests of one evaluation
MAX_BUILT_BYTES = 512 * 2**20  # what one evaluation's new builds may add to the compile cache
MULTICAST_MESSAGE = f"{MULTICAST_OFF}; it was found in"


@dataclass(frozen=True)
class BuildResult:
    ok: bool
    path: str = ""
    log: str = ""


class CompileRefused(build.CompileError):
    """A request the rules forbid (reported as ``rejected``, not as a build failure)."""


def _validated(kind: str, payload: Any) -> dict[str, Any]:
    fields = _CUBIN_FIELDS if kind == "cubin" else _EXTENSION_FIELDS if kind == "extension" else None
    if fields is None or not isinstance(payload, dict) or set(payload) != set(fields):
        raise build.CompileError(f"malformed compile request of kind {kind!r}")
    checked = {}
    for name, types in fields.items():
        value = payload[name]
        if not isinstance(value, types):
            raise build.CompileError(f"compile request field {name} has type {type(value).__name__}")
        if isinstance(value, list):
            if not all(isinstance(v, str) and len(v) < 4096 for v in value) or len(value) > 256:
                raise build.CompileError(f"compile request field {name} must be a short list of strings")
            value = tuple(value)
        if isinstance(value, str) and len(value) > MAX_SOURCE_CHARS:
            raise build.CompileError(f"compile request field {name} is longer than {MAX_SOURCE_CHARS} characters")
        checked[name] = value
    return checked


def refuse_multicast(kind: str, payload: dict[str, Any]) -> None:
    """CompileRefused when the request's text (sources, options) names NVLink multicast."""
    texts = [payload["source"], *payload["options"]] if kind == "cubin" else [
        payload["cuda_sources"], payload["cpp_sources"], *payload["extra_cflags"], *payload["extra_cuda_cflags"],
        *payload["extra_ldflags"]]
    for text in texts:
        match = MULTICAST.search(text)
        if match:
            raise CompileRefused(f"{MULTICAST_MESSAGE} the source ({match.group(0)!r})")


class CompileServer:
    """``build(kind, payload) -> BuildResult`` for the ranks of one evaluation. ``deliver_to`` is
    the folder the artifacts are copied into (readable by the candidate's ranks).

    The cache outlives the evaluation, so what a candidate may add to it is bounded: MAX_BUILDS
    distinct requests, MAX_BUILT_BYTES of new artifacts (one past it is removed and its build
    fails), each artifact at most build.MAX_ARTIFACT_BYTES; after each new build the cache is
    pruned to its budget, least recently used first (kloop_runtime.settings.compile_cache_max_bytes)."""

    def __init__(self, cache_dir: Path, secret: bytes, deliver_to: Path):
        self.cache_dir, self.secret, self.deliver_to = cache_dir, secret, deliver_to
        cache_dir.mkdir(parents=True, exist_ok=True)
        self._results: dict[str, BuildResult] = {}
        self.built_bytes = 0
        self.requests = 0
        self.failed = 0
        self.refused: str | None = None  # the first refusal's message: the evaluation is rejected

    @property
    def distinct(self) -> int:
        return len(self._results)

    def build(self, kind: str, payload: Any) -> BuildResult:
        self.requests += 1
        key = hashlib.sha256(repr((kind, sorted(payload.items()) if isinstance(payload, dict) else payload)).encode()).hexdigest()
        if key not in self._results:
            if len(self._results) >= MAX_BUILDS:
                self.failed += 1
                return BuildResult(ok=False, log=f"an evaluation may ask for at most {MAX_BUILDS} distinct builds")
            self._results[key] = self._build(kind, payload)
        return self._results[key]

    def _build(self, kind: str, payload: Any) -> BuildResult:
        try:
            payload = _validated(kind, payload)
            refuse_multicast(kind, payload)
            if kind == "cubin":
                self._refuse_preprocessed(payload)
            builder = build.build_cubin if kind == "cubin" else build.build_extension
            artifact = builder(**payload, cache_dir=self.cache_dir, confine=confined_command, on_built=self._seal)
            if not self._seal_holds(artifact):  # a cache hit not built here, or changed since: build it again
                artifact.unlink(missing_ok=True)
                artifact = builder(**payload, cache_dir=self.cache_dir, confine=confined_command, on_built=self._seal)
            return BuildResult(ok=True, path=str(self._deliver(artifact)))
        except CompileRefused as refusal:
            self.failed += 1
            self.refused = self.refused or str(refusal)
            return BuildResult(ok=False, log=str(refusal))
        except build.CompileError as error:
            self.failed += 1
            return BuildResult(ok=False, log=error.log)
        except Exception as error:  # noqa: BLE001 - a build tool failing is reported, never fatal
            log.exception("compile failed unexpectedly")
            self.failed += 1
            return BuildResult(ok=False, log=f"{type(error).__name__}: {error}")

    def _refuse_preprocessed(self, payload: dict[str, Any]) -> None:
        """Macros can paste ``multimem`` together; the preprocessor's output cannot hide it."""
        if "#" not in payload["source"].replace("#include", ""):
            return  # no macros, no pasting: the raw text was enough
        # a preprocessor that fails fails the build: the same source and options would not build either, and a build
        # that went on without the check let a source whose options broke only the preprocessing keep its macros' words
        found = _multicast_after_preprocessing(payload["source"], tuple(payload["options"]), self.cache_dir)
        if found:
            raise CompileRefused(f"{MULTICAST_MESSAGE} the preprocessed source ({found!r})")

    def _seal(self, artifact: Path) -> None:
        """Called under the entry's lock when this evaluation built ``artifact``."""
        size = artifact.stat().st_size
        if self.built_bytes + size > MAX_BUILT_BYTES:
            artifact.unlink()
            raise build.CompileError(f"this evaluation's builds would add more than {MAX_BUILT_BYTES / 2**20:.0f} MiB to the "
                                     "compile cache")
        self.built_bytes += size
        self._seal_path(artifact).write_text(self._digest(artifact))
        build.prune_cache(self.cache_dir, compile_cache_max_bytes())

    @staticmethod
    def _seal_path(artifact: Path) -> Path:
        return artifact.with_name(artifact.name + ".hmac")

    def _digest(self, artifact: Path) -> str:
        return hmac.new(self.secret, build.read_plain_file(artifact), hashlib.sha256).hexdigest()

    def _seal_holds(self, artifact: Path) -> bool:
        seal = self._seal_path(artifact)
        return seal.exists() and hmac.compare_digest(seal.read_text().strip(), self._digest(artifact))

    def _deliver(self, artifact: Path) -> Path:
        """A private copy of ``artifact`` in the ranks' folder."""
        target = self.deliver_to / artifact.parent.name / artifact.name if artifact.suffix == ".so" else self.deliver_to / artifact.name
        if not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp = target.with_name(target.name + ".tmp")
            tmp.write_bytes(build.read_plain_file(artifact))
            tmp.replace(target)
        return target


_PREPROCESSED: dict[tuple[str, tuple[str, ...]], str | None] = {}  # (source, options) -> what named multicast
_PREPROCESSED_KEPT = 256


def _multicast_after_preprocessing(source: str, options: tuple[str, ...], cache_dir: Path) -> str | None:
    """What of ``source`` names multicast once nvcc's preprocessor ran (None: nothing). Kept per
    source and options for the life of this process: a long-lived harness judges the same kernel
    again and again, and a confined ``nvcc -E`` costs a fraction of a second each time (the
    headers it can include are the toolkit's, unchanged while the process runs)."""
    key = (source, options)
    if key not in _PREPROCESSED:
        text = build.preprocess_cuda(source, options, cache_dir, confine=confined_command)
        match = MULTICAST.search(text)
        if len(_PREPROCESSED) >= _PREPROCESSED_KEPT:
            _PREPROCESSED.pop(next(iter(_PREPROCESSED)))  # the oldest
        _PREPROCESSED[key] = match.group(0) if match else None
    return _PREPROCESSED[key]
