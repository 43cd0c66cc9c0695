"""Starting the two rank groups of an evaluation.

The reference's zygote is a plain child process (trusted code). The candidate's zygote starts
inside a jail (sandbox.jail): its own namespaces, an unprivileged user, no capabilities,
Landlock. Of this project a candidate's ranks get only a private copy of what they run
(``kloop_runtime`` and the rank package, staged next to their work dir); the judge, the problems
and their oracles, the controller, the caches and the user's home are out of their reach,
also where they sit in a folder the ranks may otherwise read (site-packages). Their environment
is an allow-list too.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import structlog

from kloop_runtime import settings
from sandbox.harness.bytecode import rank_bytecode
from sandbox.harness.hidden import hidden_paths, package_dir

log = structlog.get_logger(__name__)

CANDIDATE_ENV = ("PATH", "LANG", "LC_ALL", "TZ", "CUDA_VISIBLE_DEVICES", "CUDA_HOME", "CUDA_PATH", "TORCH_CUDA_ARCH_LIST",
                 "KLOOP_CUDA_ARCH", "NCCL_DEBUG", "NCCL_P2P_LEVEL", "OMP_NUM_THREADS", "LD_LIBRARY_PATH")
TREE_USER = "kloop"  # USER and LOGNAME in a candidate's tree: its uid has no passwd entry (getpass asks those first)
# of `sandbox`: what a candidate's rank imports (jail: its zygote walls each rank off, sandbox.jail.landlock.wall_off)
RANK_FILES = ("__init__.py", "runtime.py", "rank", "readiness.py", "jail")


def stage_rank_packages(folder: Path) -> Path:
    """A private copy of what a candidate's rank imports (kloop_runtime, and of sandbox only its
    __init__, the runtime alias, the rank and jail packages), in ``folder``; returns it."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    runtime, sandbox = package_dir("kloop_runtime"), package_dir("sandbox")
    shutil.copytree(runtime, folder / "kloop_runtime", ignore=ignore, dirs_exist_ok=True)
    for name in RANK_FILES:
        source = sandbox / name
        if source.is_dir():
            shutil.copytree(source, folder / "sandbox" / name, ignore=ignore, dirs_exist_ok=True)
        else:
            (folder / "sandbox").mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, folder / "sandbox" / name)
    return folder


def packages_dir(workdir: Path) -> Path:
    """Beside a candidate's work dir: what its ranks may read and never write (the rank packages,
    and under build/ the artifacts the parent compiled for them). Not inside the work dir: the
    ranks own that, and could swap any folder of it for a link the parent would follow."""
    return workdir.with_name(workdir.name + "-packages")


def candidate_env(workdir: Path, packages: Path, mode: str, bytecode: Path | None = None) -> dict[str, str]:
    """``bytecode``: compiled imports the tree reads and never writes (sandbox.harness.bytecode); the
    caller lets the jail read it."""
    env = {name: os.environ[name] for name in CANDIDATE_ENV if name in os.environ}
    env.update(settings.MULTICAST_OFF, PYTHONPATH=str(packages), HOME=str(workdir), TMPDIR=str(workdir / "tmp"),
               PYTHONDONTWRITEBYTECODE="1", PYTHONNOUSERSITE="1", PYTHONSAFEPATH="1", PYTHONUNBUFFERED="1",
               NCCL_SOCKET_IFNAME="lo", GLOO_SOCKET_IFNAME="lo", TRITON_CACHE_DIR=str(workdir / "triton"),
               TORCHINDUCTOR_CACHE_DIR=str(workdir / "inductor"), USER=TREE_USER, LOGNAME=TREE_USER)
    if bytecode is not None:
        env["PYTHONPYCACHEPREFIX"] = str(bytecode)
    if mode == "emulate":
        env["TORCH_SYMM_MEM_ALLOW_OVERLAPPING_DEVICES"] = "1"
    return env


class Launched:
    """A started zygote (or jail): ``poll()``, ``kill()`` (the whole tree), ``measures``;
    ``pausable``: a jail, whose tree below its own processes can be stopped whole (sandbox.jail.pause)."""

    def __init__(self, process: Any, measures: list[str], kill, pausable: bool = False):
        self.process, self.measures, self._kill, self.pausable = process, measures, kill, pausable

    @property
    def pid(self) -> int:
        """The host pid at the root of the tree (a jail's keeper, or the zygote itself)."""
        return getattr(self.process, "process", self.process).pid

    def poll(self) -> int | None:
        return self.process.poll()

    def kill(self) -> None:
        self._kill()


def reference_launcher(workdir: Path, mode: str):
    env = {**os.environ, **settings.MULTICAST_OFF, "TMPDIR": str(workdir / "tmp"), "PYTHONUNBUFFERED": "1"}
    if mode == "emulate":
        env["TORCH_SYMM_MEM_ALLOW_OVERLAPPING_DEVICES"] = "1"

    def launch(argv: list[str], pass_fds: list[int], log_fd: int) -> Launched:
        process = subprocess.Popen([sys.executable, "-P", "-m", "sandbox.harness.reference_rank", *argv], pass_fds=pass_fds,
                                   stdin=subprocess.DEVNULL, stdout=log_fd, stderr=log_fd, cwd=workdir, env=env,
                                   start_new_session=True)

        def kill() -> None:
            _kill_session(process)

        return Launched(process, [], kill)

    return launch


def candidate_launcher(workdir: Path, mode: str, network: str):
    """Start the candidate's zygote in a jail writing only ``workdir``; the rank packages are
    staged beside it (``<workdir>-packages``), readable, not writable."""
    from sandbox.jail import Jail, JailSpec, own_uid

    packages = stage_rank_packages(packages_dir(workdir))
    bytecode = rank_bytecode()
    spec = JailSpec(workdir=str(workdir), readable=(str(packages), *([str(bytecode)] if bytecode else [])),
                    hidden=hidden_paths(), network=network, env=candidate_env(workdir, packages, mode, bytecode),
                    devices="none" if mode == "cpu" else "cuda", uid=own_uid())

    def launch(argv: list[str], pass_fds: list[int], log_fd: int) -> Launched:
        jail = Jail.start(spec, [sys.executable, "-m", "sandbox.rank", *argv], pass_fds=tuple(pass_fds), stdout=log_fd,
                          stderr=log_fd)
        return Launched(jail, [*jail.measures, *(f"gap: {gap}" for gap in jail.gaps)], jail.kill, pausable=True)

    return launch


def _kill_session(process: subprocess.Popen) -> None:
    """Kill a reference group's session, and collect its processes that were re-parented here:
    the zygote's forked ranks outlive it by a moment, and a harness is a child subreaper
    (sandbox.harness.lifeline), so each becomes this process's zombie. Uncollected, a warm
    harness gathered one per rank of every group it ended (hundreds over a CI run; a service that
    runs for weeks would run out of process ids)."""
    import signal

    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        process.wait(5)
    except subprocess.TimeoutExpired:
        return  # the zygote still holds its ranks: the harness's own reaping gets them
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            pid, _ = os.waitpid(-process.pid, os.WNOHANG)  # a child of this process in the session's group
        except ChildProcessError:
            return  # none (left) here
        if pid == 0:
            time.sleep(0.005)  # killed, not yet ended
