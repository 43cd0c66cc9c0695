"""What a jailed tree may read and open besides its work dir, private /tmp and /dev/shm.

Computed by the parent (which knows its Python's paths), applied by the jail's init:
system folders (minus credentials in /etc), Python's prefixes and site-packages, CUDA_HOME,
/proc and /sys (CUDA reads /proc/driver/nvidia, /sys/bus/pci, /proc/self), the caller's
``readable`` paths; devices: /dev/null, zero, full, random, urandom, and /dev/nvidia* for
``devices="cuda"``. Nothing of the project's checkout unless the caller lists it.
"""

from __future__ import annotations

import glob
import os
import re
import sys

from sandbox.jail.landlock import DEVICE, GPU_DEVICE

SYSTEM_DIRS = ("/usr", "/lib", "/lib32", "/lib64", "/libx32", "/bin", "/sbin", "/proc", "/sys")
BASIC_DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom")
ETC_SECRETS = re.compile(
    r"^(g?shadow-?|sudoers(\.d)?|ssh|security|docker|containerd|credstore.*|npmrc|pip\.conf|netrc|wireguard|"
    r"NetworkManager|openvpn|ipsec\.secrets|ppp|krb5\.keytab)$|secret|token|credential|\.key$",
    re.IGNORECASE,
)


def etc_entries(etc: str = "/etc") -> list[str]:
    """Every entry of /etc except those that hold credentials (shadow, sudoers, ssh keys...)."""
    try:
        names = sorted(os.listdir(etc))
    except OSError:
        return []
    return [os.path.join(etc, name) for name in names if not ETC_SECRETS.search(name)]


def python_paths() -> list[str]:
    """This Python's prefixes and every site-packages folder on its path."""
    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    paths |= {entry for entry in sys.path if ("site-packages" in entry or "dist-packages" in entry) and os.path.isdir(entry)}
    return sorted(paths)


def cuda_paths() -> list[str]:
    candidates = {os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"}
    return sorted(p for p in candidates if p and os.path.exists(p))


def read_paths(readable: tuple[str, ...] = (), hidden: tuple[str, ...] = ()) -> list[str]:
    """Everything the tree may read and execute, each also by its resolved path: the system's,
    Python's and CUDA's folders less the ``hidden`` paths inside them (a folder that holds one is
    replaced by its other entries), and ``readable``."""
    paths = [*SYSTEM_DIRS, *etc_entries(), *python_paths(), *cuda_paths()]
    resolved = {r for p in paths if not (r := os.path.realpath(p)).startswith("/proc/")}  # not /etc/mtab's /proc/<pid>
    allowed = sorted(p for p in set(paths) | resolved if os.path.exists(p))
    if hidden:
        allowed = carve(allowed, [os.path.realpath(h) for h in hidden])
    extra = {p for given in readable for p in (given, os.path.realpath(given)) if os.path.exists(p)}
    return sorted(set(allowed) | extra)


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def carve(paths: list[str], hidden: list[str]) -> list[str]:
    """``paths`` with each hidden path (and what is below it) taken out: a path that holds a
    hidden one gives way to its entries, down the way to it."""
    kept: list[str] = []

    def visit(path: str) -> None:
        real = os.path.realpath(path)
        if any(_inside(real, h) for h in hidden):
            return
        if not os.path.isdir(real) or not any(_inside(h, real) for h in hidden):
            kept.append(path)
            return
        try:
            entries = sorted(os.listdir(real))
        except OSError:
            return
        for entry in entries:
            visit(os.path.join(real, entry))

    for path in paths:
        visit(path)
    return sorted(set(kept))


def device_rights(devices: str) -> dict[str, int]:
    """Device files the tree may open (path -> Landlock rights)."""
    rights = {path: DEVICE for path in BASIC_DEVICES if os.path.exists(path)}
    if devices == "cuda":
        rights.update({path: GPU_DEVICE for path in sorted(glob.glob("/dev/nvidia*"))})
    return rights
