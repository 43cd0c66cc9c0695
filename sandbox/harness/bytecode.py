"""Torch's bytecode, compiled once for rank processes that would otherwise compile it at every start.

Some installations ship torch without its bytecode caches (the H200 this project is benchmarked
on does; so do images stripped of ``__pycache__``). A candidate group's zygote cannot write caches
in its jail, so it compiled torch and sympy from source at every start: 4.8 s instead of 1.7 s
on the two-core CI host. Group start-ups bound how many evaluations a minute a warm harness
runs, and they only progress outside timed phases.

When torch has no caches of its own (or ``KLOOP_RANK_BYTECODE=always``), the local sandbox compiles
them at its start, once per interpreter and torch install, into ``<cache root>/bytecode/<key>``: an isolated
Python (``-I``, an empty folder for a cwd, no project module on its path) imports torch and
what a rank imports with it, with that folder as its ``pycache_prefix``. Only files compiled
from sources a jailed rank may read anyway are kept, then the folder is renamed into place.
Every process of the local sandbox reads it as its ``PYTHONPYCACHEPREFIX`` and none writes it:
the harness and the reference's ranks (trusted) write no bytecode at all while they read it,
candidates cannot (it is not among the paths their jail may write).
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

import structlog

from kloop_runtime import settings

log = structlog.get_logger(__name__)

MODE_ENV = "KLOOP_RANK_BYTECODE"  # auto (default): only when torch has no caches; always; never
MODES = ("auto", "always", "never")
# what a rank imports at its start (the zygote's torch, torch.distributed and shape checks; symmetric memory; the
# profile stage's profiler)
RANK_IMPORTS = ("torch", "torch.distributed", "torch.fx.experimental.symbolic_shapes", "torch.distributed._symmetric_memory",
                "torch.profiler")
WARM_TIMEOUT_S = 600.0
# a folder no sandbox has started with for this long (another Python or torch install's) is removed: 40-50 MB each
UNUSED_FOR_S = 14 * 24 * 3600.0


class BytecodeError(Exception):
    """The bytecode could not be compiled (the ranks then compile their imports themselves)."""


def _mode(env: Mapping[str, str]) -> str:
    mode = env.get(MODE_ENV, "auto").strip().lower() or "auto"
    if mode not in MODES:
        _unknown_mode(mode)
        return "auto"
    return mode


@functools.lru_cache(maxsize=None)
def _unknown_mode(mode: str) -> None:
    log.warning(f"{MODE_ENV}={mode!r} is none of {', '.join(MODES)}: taken as auto")


def _tag_suffix() -> str:
    return f".{sys.implementation.cache_tag}.pyc"


@functools.lru_cache(maxsize=1)
def _torch_init() -> Path | None:
    spec = importlib.util.find_spec("torch")  # finds, never imports
    return Path(spec.origin) if spec and spec.origin else None


def torch_has_caches(torch_init: Path | None = None) -> bool:
    """Whether torch's own ``__pycache__`` holds its package's bytecode for this interpreter."""
    torch_init = torch_init or _torch_init()
    return torch_init is not None and (torch_init.parent / "__pycache__" / f"__init__{_tag_suffix()}").is_file()


def _key(torch_init: Path) -> str:
    stat = torch_init.stat()
    fingerprint = f"{sys.version}|{os.path.realpath(sys.executable)}|{torch_init}|{stat.st_mtime_ns}|{stat.st_size}"
    return hashlib.sha256(fingerprint.encode()).hexdigest()[:16]


def _wanted(env: Mapping[str, str]) -> Path | None:
    """The folder the ranks should read, published or not; None when they need none."""
    mode = _mode(env)
    torch_init = _torch_init()
    if mode == "never" or torch_init is None or (mode == "auto" and torch_has_caches(torch_init)):
        return None
    return settings.rank_bytecode_dir(env) / _key(torch_init)


def rank_bytecode(env: Mapping[str, str] | None = None) -> Path | None:
    """The compiled folder the ranks read as their ``PYTHONPYCACHEPREFIX``, if they need one and
    it is ready (``env``: the harness's environment, default this process's)."""
    folder = _wanted(os.environ if env is None else env)
    return folder if folder is not None and folder.is_dir() else None


def _source_of(compiled: Path, prefix: Path) -> Path | None:
    """The source ``compiled`` (a file under the ``prefix`` tree) was compiled from, or None if its
    name is not a plain ``<module>.<tag>.pyc``."""
    suffix = _tag_suffix()
    if not compiled.name.endswith(suffix):
        return None
    stem = compiled.name[: -len(suffix)]
    if not stem or "." in stem:  # optimisation levels (.opt-1) are never read by a rank
        return None
    return Path("/", compiled.parent.relative_to(prefix), stem + ".py")


def _inside(path: str, folders: list[str]) -> bool:
    return any(path == folder or path.startswith(folder.rstrip("/") + "/") for folder in folders)


def keep_readable_only(prefix: Path, allowed: list[str]) -> list[Path]:
    """Remove from the ``prefix`` tree every file that is not the bytecode of a source inside
    ``allowed`` (what a jailed rank may read anyway); returns the removed files."""
    removed = []
    for folder, _dirs, files in os.walk(prefix):
        for name in files:
            compiled = Path(folder, name)
            source = _source_of(compiled, prefix)
            if source is None or not source.is_file() or not _inside(os.path.realpath(source), allowed):
                compiled.unlink()
                removed.append(compiled)
    return removed


def _readable_by_ranks() -> list[str]:
    from sandbox.harness.hidden import hidden_paths
    from sandbox.jail.policy import read_paths

    return [os.path.realpath(p) for p in read_paths(hidden=hidden_paths())]


def _compile(into: Path) -> None:
    """Import RANK_IMPORTS in an isolated Python whose bytecode goes to ``into``."""
    cwd = into.with_name(into.name + "-cwd")
    cwd.mkdir()
    env = {name: os.environ[name] for name in ("PATH", "LD_LIBRARY_PATH", "CUDA_HOME", "LANG") if name in os.environ}
    env.update(HOME=str(cwd), CUDA_VISIBLE_DEVICES="")
    argv = [sys.executable, "-I", "-X", f"pycache_prefix={into}", "-c", "; ".join(f"import {name}" for name in RANK_IMPORTS)]
    try:
        done = subprocess.run(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=WARM_TIMEOUT_S)
    except subprocess.TimeoutExpired as error:
        raise BytecodeError(f"importing torch took over {WARM_TIMEOUT_S:.0f} s") from error
    finally:
        shutil.rmtree(cwd, ignore_errors=True)
    if done.returncode != 0:
        raise BytecodeError(f"importing torch failed (exit {done.returncode}): {done.stderr.strip()[-500:]}")


def _publishable(folder: Path) -> None:
    """Readable by the jail's unprivileged user, whatever this process's umask."""
    for root, dirs, files in os.walk(folder):
        os.chmod(root, 0o755)
        for name in files:
            os.chmod(os.path.join(root, name), 0o644)


def ensure_rank_bytecode(env: Mapping[str, str] | None = None) -> Path | None:
    """Compile the ranks' bytecode if they need it and nobody has (about as long as importing torch
    without caches, once); returns what ``rank_bytecode(env)`` then returns. A harness that finds
    another compiling it goes on without, and a failure only costs the speed-up."""
    target = _wanted(os.environ if env is None else env)
    if target is None:
        return None
    if target.is_dir():
        _mark_used(target)
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / ".lock", "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return None  # another harness compiles it
        if target.is_dir():
            return target
        for stale in target.parent.glob(".compiling-*"):  # left by a harness killed while compiling
            shutil.rmtree(stale, ignore_errors=True)
        scratch = target.with_name(f".compiling-{os.getpid()}")
        started = time.perf_counter()
        try:
            _compile(scratch)
            removed = keep_readable_only(scratch, _readable_by_ranks())
            _publishable(scratch)
            os.rename(scratch, target)
        except (BytecodeError, OSError) as error:
            log.warning("could not compile torch's bytecode for the ranks; they compile their imports themselves",
                        error=str(error))
            shutil.rmtree(scratch, ignore_errors=True)
            return None
        log.info("compiled torch's bytecode for the ranks", folder=str(target), seconds=round(time.perf_counter() - started, 2),
                 removed=len(removed))
        remove_unused(target.parent, keep=target)
    return target


def _mark_used(folder: Path) -> None:
    try:
        os.utime(folder)
    except OSError:
        pass  # another user's folder: it ages, and is compiled again if it is ever removed


def remove_unused(root: Path, keep: Path, unused_for_s: float = UNUSED_FOR_S) -> list[Path]:
    """Remove the folders under ``root`` other than ``keep`` that no sandbox started with for
    ``unused_for_s`` (a sandbox marks its own at every start); returns them. One still in use
    elsewhere costs that harness only the speed-up: its ranks then compile their imports."""
    cutoff = time.time() - unused_for_s
    removed = []
    for folder in root.iterdir():
        try:
            stale = folder != keep and not folder.name.startswith(".") and folder.is_dir() and folder.stat().st_mtime < cutoff
        except OSError:
            continue
        if stale:
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
    if removed:
        log.info("removed torch bytecode folders unused for a while", folders=[f.name for f in removed])
    return removed
