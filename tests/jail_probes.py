"""Hostile probes, each an escape a candidate would try; stdlib only (runs inside the jail).

``python jail_probes.py CONFIG_JSON [--old]`` runs every probe in its own forked process
(so that one that succeeds, an unshare or a setuid, cannot change the next) and writes
``{probe: "allowed: ..." | "blocked: ..."}`` as JSON to CONFIG["results"]. Network probes
use libc's connect(), as native code would (Python's audit hooks never see it). With
``--old`` the process first confines itself as the harness did before sandbox.jail existed
(sandbox.harness.confine.confine, as root, after importing ``problems``).
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import signal
import socket
import sys
from pathlib import Path

libc = ctypes.CDLL(None, use_errno=True)
libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
libc.ptrace.restype = ctypes.c_long
libc.syscall.restype = ctypes.c_long
CLONE_NEWUSER, CLONE_NEWNS = 0x10000000, 0x00020000
SYS_CLONE = {"x86_64": 56, "aarch64": 220}
PTRACE_ATTACH, PTRACE_DETACH = 16, 17


class Blocked(Exception):
    pass


def _check(result: int, what: str) -> None:
    if result != 0:
        code = ctypes.get_errno()
        raise Blocked(f"{what}: {errno.errorcode.get(code, code)}")


def native_connect(family: int, address) -> str:
    if family == socket.AF_UNIX:  # struct sockaddr_un; an abstract name starts with NUL and has no terminator
        path = address.encode()
        raw = socket.AF_UNIX.to_bytes(2, "little") + path + (b"" if path.startswith(b"\0") else b"\0")
    else:  # struct sockaddr_in
        host, port = address
        raw = socket.AF_INET.to_bytes(2, "little") + port.to_bytes(2, "big") + socket.inet_aton(host) + bytes(8)
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        _check(libc.connect(sock.fileno(), raw, len(raw)), "connect")
    finally:
        sock.close()
    return f"connected to {address!r}"


def read(path: str, must_contain: str | None = None) -> str:
    try:
        with open(path, "rb") as handle:
            data = handle.read(1 << 16)
    except OSError as error:
        raise Blocked(f"open: {errno.errorcode.get(error.errno, error.errno)}") from None
    if must_contain is not None and must_contain.encode() not in data:
        raise Blocked("read another file (not the secret)")
    return f"read {len(data)} bytes"


def write(path: str) -> str:
    fd = libc.open(path.encode(), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    if fd < 0:
        _check(-1, "open")
    libc.write(fd, b"pwned", 5)
    libc.close(fd)
    return f"wrote {path}"


def kill(pid: int, sig: int) -> str:
    try:
        os.kill(pid, sig)
    except OSError as error:
        raise Blocked(f"kill: {errno.errorcode.get(error.errno, error.errno)}") from None
    return f"signal {sig} sent to {pid}"


def ptrace(pid: int) -> str:
    _check(libc.ptrace(PTRACE_ATTACH, pid, None, None), "ptrace")
    os.waitpid(pid, 0)
    libc.ptrace(PTRACE_DETACH, pid, None, None)
    return f"attached to {pid}"


def mount(target: str) -> str:
    os.makedirs(target, exist_ok=True)
    _check(libc.mount(b"tmpfs", target.encode(), b"tmpfs", 0, None), "mount")
    return f"mounted a tmpfs on {target}"


def unshare() -> str:
    """unshare() into a new user or mount namespace, else a raw clone() into a new user namespace."""
    for flag, name in ((CLONE_NEWUSER, "user"), (CLONE_NEWNS, "mount")):
        if libc.unshare(flag) == 0:
            return f"new {name} namespace"
    child = libc.syscall(SYS_CLONE[os.uname().machine], CLONE_NEWUSER | signal.SIGCHLD, 0, 0, 0, 0)
    if child == 0:
        os._exit(0)
    _check(-1 if child < 0 else 0, "unshare and clone")
    os.waitpid(child, 0)
    return "clone() into a new user namespace"


def setuid_root() -> str:
    try:
        os.setuid(0)
    except OSError as error:
        raise Blocked(f"setuid: {errno.errorcode.get(error.errno, error.errno)}") from None
    return "uid 0"


def probes(c: dict) -> dict:
    """name -> a callable that returns what it got, or raises Blocked. Every probe but the last
    is an escape; writing /dev/shm is allowed, and the test checks the file is gone afterwards."""
    return {
        "read_cache_secret": lambda: read(c["cache_secret"], c["token"]),
        "read_etc_shadow": lambda: read("/etc/shadow", "root:"),
        "read_parent_environ": lambda: read(f"/proc/{c['parent_pid']}/environ", c["token"]),
        "read_oracle": lambda: read(c["oracle"], "def solution"),
        "connect_unix_socket_in_run": lambda: native_connect(socket.AF_UNIX, c["run_socket"]),
        "connect_tcp_loopback_outside": lambda: native_connect(socket.AF_INET, ("127.0.0.1", c["tcp_port"])),
        "connect_tcp_non_loopback": lambda: native_connect(socket.AF_INET, (c["lan_address"], c["lan_port"])),
        "connect_abstract_unix_outside": lambda: native_connect(socket.AF_UNIX, "\0" + c["abstract_name"]),
        "signal_parent": lambda: kill(int(c["parent_pid"]), 0),
        "signal_same_uid_process_outside": lambda: kill(c["victim_pid"], signal.SIGKILL),
        "ptrace_parent": lambda: ptrace(int(c["parent_pid"])),
        "ptrace_same_uid_process_outside": lambda: ptrace(c["victim_pid"]),
        "write_outside_workdir": lambda: write(os.path.join(c["outside_dir"], f"pwned-{c['token']}")),
        "write_in_dev": lambda: write(f"/dev/kloop-probe-{c['token']}"),
        "write_file_in_dev_shm": lambda: write(f"/dev/shm/kloop-probe-{c['token']}"),
        "mount": lambda: mount(os.path.join(os.getcwd(), "mnt")),
        "unshare": unshare,
        "setuid_root": setuid_root,
    }


def run_isolated(probe) -> str:
    """Run ``probe`` in a forked child; its verdict comes back through a pipe."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_end)
        try:
            verdict = "allowed: " + probe()
        except Blocked as error:
            verdict = f"blocked: {error}"
        except Exception as error:  # noqa: BLE001 - any failure to escape is a block
            verdict = f"blocked: {type(error).__name__}: {error}"
        os.write(write_end, verdict.encode()[:4000])
        os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as handle:
        verdict = handle.read().decode()
    os.waitpid(pid, 0)
    return verdict or "blocked: the probe died"


def confine_as_before(c: dict) -> None:
    import problems.registry  # noqa: F401 - the old worker imported it before confining

    from sandbox.harness.confine import confine

    confine(Path(os.getcwd()), Path(c["compile_cache"]))


def main() -> None:
    c = json.loads(sys.argv[1])
    if "--old" in sys.argv:
        confine_as_before(c)
    results = {name: run_isolated(probe) for name, probe in probes(c).items()}
    with open(c["results"], "w") as handle:
        json.dump(results, handle)


if __name__ == "__main__":
    main()
