"""Helpers for the jail's tests: run the jail from root or from an unprivileged user, find
processes a jail left behind, listeners outside the jail for the probes to reach for."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

from sandbox.jail import policy

PROJECT_ROOT = str(Path(__file__).resolve().parents[3])
DRIVER = str(Path(__file__).with_name("driver.py"))
NOBODY = 65534

# The test runs as root; to cover the jail's user-namespace path, the driver runs as uid 65534
# in a mount namespace where the folders that user cannot pass through (/root, where the venv's
# Python lives; pytest's 0700 temporary root) are masked except for the paths it needs.
_BOOT = r"""
import json, os, sys
config = json.loads(sys.argv[1])
sys.path.insert(0, config["root"])
from sandbox.jail import kernel, mounts
kernel.unshare(kernel.CLONE_NEWNS)
kernel.mount(None, "/", None, kernel.MS_REC | kernel.MS_PRIVATE)
keep = dict(config["keep"])
mounts.overmount(mounts.closed_ancestors(keep, config["uid"], config["uid"]), keep)
os.setgroups([])
os.setresgid(config["uid"], config["uid"], config["uid"])
os.setresuid(config["uid"], config["uid"], config["uid"])
os.execve(config["argv"][0], config["argv"], config["env"])
"""


def as_unprivileged(argv: list[str], readable: list[str], writable: list[str], env: dict[str, str]) -> list[str]:
    """``argv`` run as uid 65534 (no capability, no root), seeing ``readable`` and ``writable``."""
    keep = {p: False for p in [*policy.python_paths(), PROJECT_ROOT, *readable]}
    keep.update({p: True for p in writable})
    config = {"root": PROJECT_ROOT, "keep": sorted(keep.items()), "uid": NOBODY, "argv": argv, "env": env}
    return [sys.executable, "-S", "-B", "-P", "-c", _BOOT, json.dumps(config)]


def run_driver(config: dict, unprivileged: bool, env: dict[str, str] | None = None, timeout_s: float = 300) -> dict:
    """Run tests/sandbox/jail/driver.py with ``config`` (as root, or as uid 65534); returns its JSON."""
    env = {"PATH": os.environ["PATH"], **(env or {})}
    argv = [sys.executable, DRIVER, json.dumps(config)]
    if unprivileged:
        workdir = config["spec"]["workdir"]
        argv = as_unprivileged(argv, readable=[str(Path(DRIVER).parent)], writable=[workdir], env=env)
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout_s)
    assert done.returncode == 0, f"driver failed ({done.returncode}):\n{done.stdout}\n{done.stderr}"
    return json.loads(done.stdout.strip().splitlines()[-1])


def give_to_nobody(*paths: Path) -> None:
    for path in paths:
        os.chown(path, NOBODY, NOBODY)


def processes_with(token: str) -> list[str]:
    """'pid state cmdline' of every live process whose command line carries ``token``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if token in cmdline and state != "Z":
            found.append(f"{entry} {state} {cmdline.strip()}")
    return found


def non_loopback_address() -> str | None:
    """A global IPv4 address of this machine: connecting to it never leaves the machine."""
    out = subprocess.run(["ip", "-4", "-o", "addr", "show", "scope", "global"], capture_output=True, text=True).stdout
    for line in out.splitlines():
        fields = line.split()
        if "inet" in fields:
            return fields[fields.index("inet") + 1].split("/")[0]
    return None


def listener(family: int, address) -> socket.socket:
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.bind(address)
    sock.listen(16)
    return sock
