"""What a jail is asked for (JailSpec) and what its init is handed (a JSON config)."""

from __future__ import annotations

import hashlib
import os
import secrets
from dataclasses import dataclass, field

from sandbox.jail import policy

NOBODY = 65534
# a tree's own uid under root (own_uid): above systemd's container range (up to 0x6fffffff), below its foreign range (0x7ffe0000)
TREE_UIDS = range(2_000_000_000, 2_000_000_000 + 2**24)
NETWORKS = ("none", "loopback")
DEVICES = ("none", "cuda")
# soft = hard limit for the tree; nproc counts every process and thread of the tree's uid
DEFAULT_RLIMITS = {"core": 0, "nofile": 65536, "fsize": 16 * 2**30, "nproc": 8192}
MAX_TMPFS_BYTES = 8 * 2**30


def own_uid(key: str | None = None) -> int | None:
    """A uid of its own for one tree, or for the trees of one ``key`` (an agent's shell: one uid a
    episode, so that a command's files stay its next command's), from TREE_UIDS, where kloop runs
    as root; None elsewhere (the tree keeps the caller's uid in a user namespace of its own, where
    the kernel counts its processes apart from others'). The kernel counts RLIMIT_NPROC by uid:
    trees that all ran as 65534 shared one count, and a candidate that started 8191 threads left
    every other tree of that uid (a pre-started group, a concurrent evaluation's ranks, a compiler,
    another episode's shell) unable to start a thread or fork until it ended
    (tests/sandbox/jail/test_tree_uid.py)."""
    if os.geteuid() != 0:
        return None
    if key is None:
        return TREE_UIDS[secrets.randbelow(len(TREE_UIDS))]
    return TREE_UIDS[int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "little") % len(TREE_UIDS)]


def default_tmpfs_bytes() -> int:
    """The size of each of the tree's private /tmp and /dev/shm: files there are host memory that
    no process holds (so no watch of resident memory sees them), and a tmpfs left at the kernel's
    default may take half the host's. 8 GiB, or an eighth of the host's memory where that is less."""
    return min(MAX_TMPFS_BYTES, os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 8)


class JailError(Exception):
    """The jail could not be set up as asked (the message says why and what to do)."""


@dataclass(frozen=True)
class JailSpec:
    """One hostile process tree's confinement.

    workdir: the only folder the tree may write besides its private /tmp and /dev/shm; its
      home and current directory. When kloop runs as root it is handed to the tree's uid.
    readable: further files or folders the tree may read (a rank package, a compile cache).
    hidden: files or folders inside readable ones that the tree may not read (a project's
      packages where they sit in site-packages next to the ones it needs).
    network: "none" (no TCP at all, no interface but a downed loopback) or "loopback"
      (loopback only: gloo, NCCL bootstrap between the tree's own processes).
    uid: the tree's uid (and gid) when kloop runs as root (default 65534, shared by every tree
      given none: a tree of hostile code takes :func:`own_uid`); as non-root the tree keeps the
      caller's uid inside a user namespace.
    env: the tree's whole environment (build it from an allow-list); HOME and TMPDIR are set.
    rlimits: overrides of DEFAULT_RLIMITS (core, nofile, fsize, nproc; soft = hard).
    devices: "none", or "cuda" for /dev/nvidia*.
    tmpfs_bytes: the size of each of its private /tmp and /dev/shm, and of all its System V shared
        memory where the jail can bound it (default: default_tmpfs_bytes()).
    """

    workdir: str
    readable: tuple[str, ...] = ()
    hidden: tuple[str, ...] = ()
    network: str = "none"
    uid: int | None = None
    env: dict[str, str] = field(default_factory=dict)
    rlimits: dict[str, int] = field(default_factory=dict)
    devices: str = "none"
    tmpfs_bytes: int | None = None

    def __post_init__(self):
        if self.network not in NETWORKS:
            raise JailError(f"network must be one of {', '.join(NETWORKS)}, not {self.network!r}")
        if self.devices not in DEVICES:
            raise JailError(f"devices must be one of {', '.join(DEVICES)}, not {self.devices!r}")
        if not os.path.isabs(self.workdir) or not os.path.isdir(self.workdir):
            raise JailError(f"the jail's workdir must be an existing folder given by its absolute path, not {self.workdir!r}")
        unknown = set(self.rlimits) - set(DEFAULT_RLIMITS)
        if unknown:
            raise JailError(f"unknown rlimits {sorted(unknown)}: known are {', '.join(DEFAULT_RLIMITS)}")
        if self.uid is not None and os.geteuid() != 0 and self.uid != os.geteuid():
            raise JailError(f"uid={self.uid} needs kloop to run as root; as uid {os.geteuid()} the tree keeps that uid")
        object.__setattr__(self, "workdir", os.path.realpath(self.workdir))
        object.__setattr__(self, "readable", tuple(os.path.abspath(p) for p in self.readable))

    def config(self, argv: list[str], pass_fds: tuple[int, ...]) -> dict:
        """The init's instructions, with every path resolved here, in the caller's process."""
        root = os.geteuid() == 0
        uid = (NOBODY if self.uid is None else self.uid) if root else os.geteuid()
        return {
            "argv": list(argv), "workdir": self.workdir, "read": policy.read_paths(self.readable, self.hidden),
            "devices": policy.device_rights(self.devices), "network": self.network, "root": root, "uid": uid,
            "gid": uid if root else os.getegid(), "env": dict(self.env), "rlimits": {**DEFAULT_RLIMITS, **self.rlimits},
            "pass_fds": list(pass_fds), "tmpfs_bytes": self.tmpfs_bytes or default_tmpfs_bytes(),
        }


def gaps(network: str, measures: list[str]) -> list[str]:
    """What the caller should know did NOT hold, in words."""
    held = set(measures)
    found = []
    if not any(m.startswith("landlock-fs") for m in held):
        found.append("filesystem: no Landlock; reads and writes are limited by file permissions only")
    if network == "none" and not held & {"net-namespace", "landlock-net"}:
        found.append("network: not blocked (no network namespace, no Landlock network rules)")
    elif network == "none" and "net-namespace" not in held:
        found.append("network: only TCP is blocked (Landlock); UDP is not")
    elif network == "loopback" and "net-namespace" not in held:
        found.append("network: not limited to loopback (no network namespace)")
    if not held & {"pid-namespace", "landlock-scope-signal"}:
        found.append("signals: the tree can signal processes of its own uid outside it (no PID namespace, no Landlock "
                     "signal scope)")
    if not held & {"net-namespace", "landlock-scope-abstract-unix"}:
        found.append("unix sockets: an abstract socket outside the jail can be connected to (no network namespace, no "
                     "Landlock scope)")
    if "mount-namespace" not in held:
        found.append("unix sockets: a listening socket outside the jail can be connected to by its path (no mount "
                     "namespace to hide /run and /tmp; Landlock does not cover connect)")
    if not held & {"pid-namespace", "scoped-kill"}:
        found.append("processes: a process that leaves the jail's session can outlive the jail (no PID namespace, "
                     "no Landlock signal scope)")
    if "sysv-ipc-bounded" not in held:
        found.append("System V IPC: shared memory segments and message queues are not bounded (" +
                     ("the jail's IPC namespace kept its defaults" if "ipc-namespace" in held else "no IPC namespace of "
                      "the jail's own") + "); what they hold is not counted as any process's memory")
    return found
