"""The Linux calls the jail makes that Python 3.11's os module lacks (ctypes into libc).

Stdlib only: this runs in the jail's init before anything else is imported.
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import socket
import struct
import sys

CLONE_NEWNS = 0x00020000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000

MS_RDONLY = 0x1
MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_NOEXEC = 0x8
MS_REMOUNT = 0x20
MS_NOATIME = 0x400
MS_NODIRATIME = 0x800
MS_BIND = 0x1000
MS_REC = 0x4000
MS_PRIVATE = 1 << 18
MS_RELATIME = 1 << 21
# statvfs f_flag bits -> the mount flags a bind remount must repeat (locked in a user namespace)
_KEPT_FLAGS = {os.ST_NOSUID: MS_NOSUID, os.ST_NODEV: MS_NODEV, os.ST_NOEXEC: MS_NOEXEC, os.ST_NOATIME: MS_NOATIME,
               os.ST_NODIRATIME: MS_NODIRATIME, os.ST_RELATIME: MS_RELATIME}

PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_CAPBSET_DROP = 24
PR_SET_CHILD_SUBREAPER = 36
PR_SET_NO_NEW_PRIVS = 38
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
_LINUX_CAPABILITY_VERSION_3 = 0x20080522

_libc = ctypes.CDLL(None, use_errno=True)
if sys.platform == "linux":
    _libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
    _libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    _libc.syscall.restype = ctypes.c_long


def libc() -> ctypes.CDLL:
    return _libc


def check(result: int, what: str) -> int:
    if result < 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")
    return result


def unshare(flags: int) -> None:
    check(_libc.unshare(flags), "unshare")


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    encode = lambda s: None if s is None else os.fsencode(s)  # noqa: E731
    check(_libc.mount(encode(source), encode(target), encode(fstype), flags, encode(data)), f"mount {target}")


def remount_bind_readonly(target: str) -> None:
    """Make the bind mount at ``target`` read-only, repeating the flags it already has (a user
    namespace refuses a remount that would clear a locked one)."""
    kept = os.statvfs(target).f_flag
    flags = MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV
    for bit, flag in _KEPT_FLAGS.items():
        if kept & bit:
            flags |= flag
    mount(None, target, None, flags)


def prctl(option: int, arg2: int = 0, arg3: int = 0) -> int:
    return check(_libc.prctl(option, arg2, arg3, 0, 0), f"prctl({option})")


def set_no_new_privs() -> None:
    prctl(PR_SET_NO_NEW_PRIVS, 1)


def drop_capability_bounds() -> None:
    """Empty the bounding and ambient sets: no exec can grant a capability again. Needs
    CAP_SETPCAP, so call it while still privileged (without it, e.g. in a container that
    already dropped everything, nothing is done and capabilities_empty() tells)."""
    with open("/proc/sys/kernel/cap_last_cap") as handle:
        last = int(handle.read())
    for cap in range(last + 1):
        try:
            prctl(PR_CAPBSET_DROP, cap)
        except OSError:
            break
    try:
        prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL)
    except OSError:
        pass


def clear_capabilities() -> None:
    """Empty the effective, permitted and inheritable sets (after the last setuid)."""
    header = (ctypes.c_uint32 * 2)(_LINUX_CAPABILITY_VERSION_3, 0)
    data = (ctypes.c_uint32 * 6)()
    check(_libc.capset(header, data), "capset")


def capabilities_empty() -> bool:
    """Whether this process holds no capability in any set, as the kernel reports it."""
    with open("/proc/self/status") as handle:
        fields = dict(line.split(":", 1) for line in handle if line.startswith("Cap"))
    return all(int(fields[name].strip(), 16) == 0 for name in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"))


def loopback_up() -> bool:
    """Bring ``lo`` up (in a fresh network namespace it starts down); returns whether it is up."""
    siocgifflags, siocsifflags, iff_up = 0x8913, 0x8914, 0x1
    layout = "16sH14x"  # struct ifreq: name, flags
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        flags = struct.unpack(layout, fcntl.ioctl(sock.fileno(), siocgifflags, struct.pack(layout, b"lo", 0)))[1]
        fcntl.ioctl(sock.fileno(), siocsifflags, struct.pack(layout, b"lo", flags | iff_up))
        return bool(struct.unpack(layout, fcntl.ioctl(sock.fileno(), siocgifflags, struct.pack(layout, b"lo", 0)))[1] & iff_up)
