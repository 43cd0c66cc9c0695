"""/dev/shm where a jail could not make the tree its own (in a container: no mount namespace for
an unprivileged user): every tree of the sandbox writes the same folder, so what one evaluation's
candidate leaves there would be there for the next one's (tests/sandbox/backends/test_docker_warm.py).
The harness empties it, before any candidate code of an evaluation runs, of whatever no live
process holds open or mapped: the groups of earlier evaluations have ended by then (a warm
harness waits for them: sandbox/harness/warm.py), and those alive (this evaluation's, groups
started ahead) keep what they use. Only where the sandbox says the folder is its own
(``SWEEP_ENV``: a Docker sandbox's container), never on a host where other programs use it too.
"""

from __future__ import annotations

import os

import structlog

log = structlog.get_logger(__name__)

SHM = "/dev/shm"
SWEEP_ENV = "KLOOP_SWEEP_SHARED_SHM"  # set by a sandbox whose /dev/shm is its own (sandbox/backends/docker.py)


def sweep_wanted(measures: list[str] | tuple[str, ...]) -> bool:
    """Whether to sweep: the jail gave the tree no /dev/shm of its own, and the sandbox owns the folder."""
    return "private-shm" not in measures and os.environ.get(SWEEP_ENV) == "1"


def held_paths(root: str = SHM) -> set[str]:
    """Paths under ``root`` that a live process has open or mapped (as /proc shows them: the
    processes this one may read)."""
    prefix = root.rstrip("/") + "/"
    held: set[str] = set()
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                try:
                    target = os.readlink(f"/proc/{pid}/fd/{fd}")
                except OSError:
                    continue
                if target.startswith(prefix):
                    held.add(target.removesuffix(" (deleted)"))
            with open(f"/proc/{pid}/maps", errors="surrogateescape") as maps:  # undecodable names as os.walk gives them
                for line in maps:
                    fields = line.split(maxsplit=5)  # address, perms, offset, device, inode, path (where there is one)
                    path = fields[5].strip() if len(fields) == 6 else ""
                    if path.startswith(prefix):
                        held.add(path.removesuffix(" (deleted)"))
        except (OSError, IndexError):
            continue  # ended meanwhile, or not ours to read
    return held


def sweep(root: str = SHM) -> int:
    """Remove every file under ``root`` that no live process holds, then the folders left empty;
    how many files were removed."""
    held = held_paths(root)
    removed = 0
    for folder, dirs, files in os.walk(root, topdown=False):
        for name in files:
            path = os.path.join(folder, name)
            if path not in held:
                try:
                    os.unlink(path)
                    removed += 1
                except OSError:
                    pass  # not ours (another user's), or gone
        if folder != root:
            try:
                os.rmdir(folder)
            except OSError:
                pass  # not empty, or not ours
    if removed:
        log.info("swept files earlier trees left in the shared /dev/shm", removed=removed)
    return removed
