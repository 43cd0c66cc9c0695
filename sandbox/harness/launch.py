"""Starting the two rank groups of an evaluation.

The reference's zygote is a plain child process (trusted code). The candidate's zygote starts
inside a jail (sandbox.jail): its own namespaces, an unprivileged user, no capabilities,
Landlock. What a candidate's ranks may read is an allow-list: system folders, Python and its
packages, CUDA, and of this project only ``kloop_runtime`` and the rank package
(``sandbox/__init__.py``, ``sandbox/runtime.py``, ``sandbox/rank/``); every other folder of the
project (the judge, the problems and their oracles, the controller), the caches and the user's
home are carved out of whatever allowed folder holds them. Its environment is an allow-list too.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import structlog

from kloop_runtime import settings

log = structlog.get_logger(__name__)

CANDIDATE_ENV = ("PATH", "LANG", "LC_ALL", "TZ", "CUDA_VISIBLE_DEVICES", "CUDA_HOME", "CUDA_PATH", "TORCH_CUDA_ARCH_LIST",
                 "KLOOP_CUDA_ARCH", "NCCL_DEBUG", "NCCL_P2P_LEVEL", "OMP_NUM_THREADS", "LD_LIBRARY_PATH")
SYSTEM_READ = ("/usr", "/lib", "/lib32", "/lib64", "/bin", "/sbin", "/etc", "/opt", "/proc", "/sys", "/dev",
               "/run/nvidia-persistenced")


def _package_dir(name: str) -> Path:
    module = sys.modules.get(name) or __import__(name)
    return Path(module.__file__).resolve().parent


def project_packages() -> dict[str, Path]:
    return {name: _package_dir(name) for name in ("sandbox", "problems", "kloop_runtime", "prompts", "agent")
            if _importable(name)}


def _importable(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None


def candidate_readable(extra: list[str] = ()) -> tuple[list[str], list[str]]:
    """(readable, listable): folders and files a candidate rank may read, and the folders above
    carved-out ones that it may only list (Python's importer lists folders to find modules)."""
    packages = project_packages()
    sandbox = packages["sandbox"]
    allowed = [str(packages["kloop_runtime"]), str(sandbox / "__init__.py"), str(sandbox / "runtime.py"), str(sandbox / "rank")]
    forbidden = [str(p) for p in packages.values()] + [str(settings.cache_root()), os.path.expanduser("~")]
    roots = set(SYSTEM_READ) | {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    roots |= {entry for entry in sys.path if entry and os.path.isdir(entry)}
    for name in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(name):
            roots.add(os.environ[name])
    readable, listable = carve(sorted(r for r in roots if os.path.exists(r)), forbidden, allowed)
    return readable + list(extra), listable


def carve(roots: list[str], forbidden: list[str], allowed: list[str]) -> tuple[list[str], list[str]]:
    """``roots`` with every ``forbidden`` path (and what is below it) taken out, then ``allowed``
    paths put back: each root that holds a forbidden path is replaced by its children, down the
    path to it. Returns (readable, listable-only folders)."""
    forbidden_real = [os.path.realpath(p) for p in forbidden]
    allowed_real = [os.path.realpath(p) for p in allowed]

    def inside(path: str, folder: str) -> bool:
        return path == folder or path.startswith(folder.rstrip("/") + "/")

    readable: list[str] = []
    listable: list[str] = []

    def visit(path: str) -> None:
        real = os.path.realpath(path)
        if any(inside(real, f) for f in forbidden_real):
            return
        if not any(inside(f, real) for f in forbidden_real):
            readable.append(real)
            return
        listable.append(real)
        try:
            children = sorted(os.listdir(real))
        except OSError:
            return
        for child in children:
            visit(os.path.join(real, child))

    for root in roots:
        visit(root)
    readable += [a for a in allowed_real if os.path.exists(a)]
    for path in allowed_real:  # the folders above an allowed path must be listable for imports
        parent = os.path.dirname(path)
        while parent and parent != "/" and parent not in listable and not any(inside(parent, r) for r in readable):
            listable.append(parent)
            parent = os.path.dirname(parent)
    return sorted(set(readable)), sorted(set(listable))


def candidate_env(workdir: Path, mode: str) -> dict[str, str]:
    env = {name: os.environ[name] for name in CANDIDATE_ENV if name in os.environ}
    packages = project_packages()
    paths = [str(packages["kloop_runtime"].parent)]
    if str(packages["sandbox"].parent) not in paths:
        paths.append(str(packages["sandbox"].parent))
    env.update(settings.MULTICAST_OFF, PYTHONPATH=os.pathsep.join(paths), HOME=str(workdir), TMPDIR=str(workdir / "tmp"),
               PYTHONDONTWRITEBYTECODE="1", PYTHONNOUSERSITE="1", PYTHONSAFEPATH="1", PYTHONUNBUFFERED="1",
               NCCL_SOCKET_IFNAME="lo", GLOO_SOCKET_IFNAME="lo", TRITON_CACHE_DIR=str(workdir / "triton"),
               TORCHINDUCTOR_CACHE_DIR=str(workdir / "inductor"))
    if mode == "emulate":
        env["TORCH_SYMM_MEM_ALLOW_OVERLAPPING_DEVICES"] = "1"
    return env


class Launched:
    """A started zygote (or jail): ``poll()``, ``kill()`` (the whole tree), ``measures``."""

    def __init__(self, process: Any, measures: list[str], kill):
        self.process, self.measures, self._kill = process, measures, kill

    def poll(self) -> int | None:
        return self.process.poll()

    def kill(self) -> None:
        self._kill()


def reference_launcher(workdir: Path, mode: str):
    env = {**os.environ, **settings.MULTICAST_OFF, "TMPDIR": str(workdir / "tmp"), "PYTHONUNBUFFERED": "1"}
    if mode == "emulate":
        env["TORCH_SYMM_MEM_ALLOW_OVERLAPPING_DEVICES"] = "1"

    def launch(argv: list[str], pass_fds: list[int], log_fd: int) -> Launched:
        process = subprocess.Popen([sys.executable, "-m", "sandbox.harness.reference_rank", *argv], pass_fds=pass_fds,
                                   stdin=subprocess.DEVNULL, stdout=log_fd, stderr=log_fd, cwd=workdir, env=env,
                                   start_new_session=True)

        def kill() -> None:
            _kill_session(process)

        return Launched(process, [], kill)

    return launch


def candidate_launcher(workdir: Path, mode: str, network: str):
    try:
        from sandbox.jail import Jail, JailSpec
    except ImportError:  # TEMPORARY until sandbox.jail lands
        return _interim_launcher(workdir, mode)

    readable, listable = candidate_readable()
    spec = JailSpec(workdir=workdir, readable=readable, listable=listable, network=network,
                    env=candidate_env(workdir, mode), devices="none" if mode == "cpu" else "cuda")

    def launch(argv: list[str], pass_fds: list[int], log_fd: int) -> Launched:
        jail = Jail.start(spec, [sys.executable, "-m", "sandbox.rank", *argv], pass_fds=pass_fds, stdout=log_fd)
        return Launched(jail, list(jail.measures), jail.kill)

    return launch


def _kill_session(process: subprocess.Popen) -> None:
    import signal

    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        process.wait(5)
    except subprocess.TimeoutExpired:
        pass


def _interim_launcher(workdir: Path, mode: str):
    env = candidate_env(workdir, mode)

    def launch(argv: list[str], pass_fds: list[int], log_fd: int) -> Launched:
        process = subprocess.Popen([sys.executable, "-m", "sandbox.rank", *argv], pass_fds=pass_fds, stdin=subprocess.DEVNULL,
                                   stdout=log_fd, stderr=log_fd, cwd=workdir, env=env, start_new_session=True)
        return Launched(process, ["interim"], lambda: _kill_session(process))

    return launch
