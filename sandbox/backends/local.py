"""The local backend: a subprocess in a fresh work dir.

Weaker isolation than Docker, for machines without it: a new session and process group
(killed whole on timeout, with a sweep for anything that escaped the group), an environment
allow-list (no API keys ever), rlimits, and, inside the harness, Landlock confinement of
candidate ranks where the kernel has it. No network namespace: a candidate could reach the
network through native code. Use ``--sandbox docker`` for untrusted work at scale.

Nothing outlives an owner killed without closing its sandbox: the harness ends its processes
when its report channel loses its reader (sandbox.harness.lifeline), and the work dir, which
names its owner in ``OWNER_FILE``, is removed by the next local sandbox started in the same
place once that owner is gone. A kept work dir (``keep``) names no owner and is never swept.
"""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import structlog

from kloop_runtime import settings
from kloop_runtime.tree_removal import remove_tree
from sandbox.backends.base import MAX_OUTPUT_BYTES, CappedReader, ExecResult, Sandbox, SandboxError
from sandbox.backends.owner import owner, owner_alive
from sandbox.harness.bytecode import ensure_rank_bytecode, rank_bytecode

log = structlog.get_logger(__name__)

ENV_ALLOWLIST = (
    "PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TERM", "CUDA_HOME", "CUDA_PATH", "CUDA_VISIBLE_DEVICES", "NVCC",
    "LD_LIBRARY_PATH", "PYTHONPATH", "VIRTUAL_ENV", "TORCH_CUDA_ARCH_LIST", "OMP_NUM_THREADS", "NCCL_DEBUG",
    "NCCL_SOCKET_IFNAME", "NCCL_P2P_LEVEL", "KLOOP_CACHE_DIR", "KLOOP_COMPILE_CACHE", "KLOOP_CUDA_ARCH",
    "KLOOP_REFERENCE_CACHE_MAX_GB", "KLOOP_RANK_BYTECODE",
)
PROJECT_ROOT = str(Path(__file__).resolve().parents[2])
WORKDIR_PREFIX = "kloop-"
OWNER_FILE = ".kloop-owner"


def sandbox_env(workdir: str, marker: str, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The allow-listed environment: nothing else of the caller's (no API keys) gets in."""
    env = {name: os.environ[name] for name in ENV_ALLOWLIST if name in os.environ}
    env.setdefault(settings.CACHE_ROOT_ENV, str(settings.cache_root()))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [PROJECT_ROOT, env.get("PYTHONPATH")]))
    env.update(HOME=workdir, TMPDIR=os.path.join(workdir, "tmp"), KLOOP_SANDBOX=marker, PYTHONUNBUFFERED="1")
    env.update(extra or {})
    if (bytecode := rank_bytecode(env)) is not None:  # torch's, compiled once; the harness and its ranks write no bytecode
        env.update(PYTHONPYCACHEPREFIX=str(bytecode), PYTHONDONTWRITEBYTECODE="1")
    return env


class SessionProcess(subprocess.Popen):
    """A spawned process that leads its own session: ``kill_tree`` ends the session."""

    def kill_tree(self) -> None:
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def _limit_resources() -> None:
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    soft = 65536 if hard == resource.RLIM_INFINITY else min(65536, hard)
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    file_cap = 16 * 2**30
    resource.setrlimit(resource.RLIMIT_FSIZE, (file_cap, file_cap))


def sweep_orphaned_workdirs(base: str) -> list[str]:
    """Remove the local sandboxes' work dirs in ``base`` whose owner is gone; returns them."""
    removed = []
    try:
        names = [name for name in os.listdir(base) if name.startswith(WORKDIR_PREFIX)]
    except OSError:
        return removed
    for name in names:
        path = os.path.join(base, name)
        try:
            if os.lstat(path).st_uid != os.getuid():
                continue  # another user's (whose processes this one may not even see)
            with open(os.path.join(path, OWNER_FILE)) as handle:
                named = handle.read(200)
        except OSError:
            continue  # not a sandbox's, kept, or being made: never ours to remove
        if not owner_alive(named):
            remove_tree(path)
            removed.append(path)
    if removed:
        log.warning("removed work dirs of local sandboxes whose owner is gone", count=len(removed), base=base)
    return removed


class LocalSandbox(Sandbox):
    name = "local"
    isolation = ("env-allowlist", "rlimits", "process-group")

    def __init__(self, base_dir: str | None = None, keep: bool = False, env: dict[str, str] | None = None):
        self.base_dir, self.keep, self.extra_env = base_dir, keep, env or {}
        self.python = sys.executable
        self.marker = f"kloop-{uuid.uuid4().hex[:12]}"
        self.workdir = ""

    def start(self) -> None:
        if self.base_dir:
            os.makedirs(self.base_dir, exist_ok=True)
        sweep_orphaned_workdirs(self.base_dir or tempfile.gettempdir())
        ensure_rank_bytecode({**os.environ, **self.extra_env})  # the cache root and mode the harness will see
        self.workdir = tempfile.mkdtemp(prefix=WORKDIR_PREFIX, dir=self.base_dir)
        os.makedirs(os.path.join(self.workdir, "tmp"), exist_ok=True)
        if not self.keep:
            Path(self.workdir, OWNER_FILE).write_text(owner())

    def _path(self, path: str) -> str:
        if not self.workdir:
            raise SandboxError("the sandbox is not started")
        full = os.path.realpath(os.path.join(self.workdir, path))
        if not full.startswith(os.path.realpath(self.workdir) + os.sep):
            raise SandboxError(f"{path!r} is outside the sandbox work dir")
        return full

    def exec(self, cmd: list[str], timeout_s: float, env: dict[str, str] | None = None, input: bytes | None = None,
             cwd: str | None = None) -> ExecResult:
        started = time.monotonic()
        try:
            proc = subprocess.Popen(
                cmd, cwd=self._path(cwd) if cwd else self.workdir, env=sandbox_env(self.workdir, self.marker, {**self.extra_env, **(env or {})}),
                stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, start_new_session=True, preexec_fn=_limit_resources,
            )
        except OSError as error:
            raise SandboxError(f"cannot start {cmd[0]!r}: {error}") from error
        readers = [CappedReader(proc.stdout, MAX_OUTPUT_BYTES), CappedReader(proc.stderr, MAX_OUTPUT_BYTES)]
        for reader in readers:
            reader.start()
        if input is not None:
            try:
                proc.stdin.write(input)
                proc.stdin.close()
            except BrokenPipeError:
                pass
        timed_out = False
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
        finally:  # on timeout, on interruption, and whatever the command left running
            self._kill_session(proc.pid)
            proc.wait()
        for reader in readers:
            reader.join(5)
        return ExecResult(
            returncode=proc.returncode, stdout=readers[0].text(), stderr=readers[1].text(), timed_out=timed_out,
            duration_s=round(time.monotonic() - started, 3), truncated=any(r.dropped for r in readers),
        )

    def spawn(self, cmd: list[str], cwd: str | None = None) -> SessionProcess:
        """A long-lived process in the sandbox (its own session, the sandbox's environment), with
        pipes on stdin and stdout and stderr to spawned.log in the work dir; the caller ends it
        (``kill_tree``, or its stdin closed)."""
        log_path = os.path.join(self._path(cwd) if cwd else self.workdir, "spawned.log")
        with open(log_path, "ab") as log_file:
            try:
                return SessionProcess(cmd, cwd=self._path(cwd) if cwd else self.workdir, env=sandbox_env(self.workdir, self.marker, self.extra_env),
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log_file, start_new_session=True,
                                      preexec_fn=_limit_resources)
            except OSError as error:
                raise SandboxError(f"cannot start {cmd[0]!r}: {error}") from error

    def _kill_session(self, session_id: int) -> None:
        try:
            os.killpg(session_id, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self._sweep()

    def terminate(self) -> None:
        """Kill every process of this sandbox (all carry its marker), whatever session it is in;
        the work dir stays and the sandbox can run commands again."""
        self._sweep()

    def _sweep(self) -> None:
        """Kill processes that left the session but carry this sandbox's marker."""
        import psutil

        for proc in psutil.process_iter():
            try:
                if proc.environ().get("KLOOP_SANDBOX") == self.marker:
                    proc.kill()
            except (psutil.Error, OSError):
                continue

    def write_file(self, path: str, content: bytes | str) -> None:
        full = self._path(path)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "wb") as handle:
            handle.write(content.encode() if isinstance(content, str) else content)

    def read_file(self, path: str, max_bytes: int = MAX_OUTPUT_BYTES) -> bytes:
        try:
            with open(self._path(path), "rb") as handle:
                return handle.read(max_bytes)
        except FileNotFoundError:
            raise SandboxError(f"{path} does not exist in the sandbox") from None

    def close(self) -> None:
        if self.workdir and not self.keep:
            remove_tree(self.workdir)
