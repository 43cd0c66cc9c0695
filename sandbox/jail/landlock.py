"""Landlock: an unprivileged process restricts itself (and every child it will have).

Filesystem (ABI 1+): only the listed paths, with the listed rights; mount, pivot_root and
ptrace of processes outside the domain are refused too. Network (ABI 4+): TCP bind and
connect refused on every port. Scopes (ABI 6+): no signal to, and no connection to an
abstract unix socket of, a process outside the domain. Stdlib only (ctypes).
"""

from __future__ import annotations

import ctypes
import os
import stat
import sys

from sandbox.jail.kernel import check, libc, set_no_new_privs

_SYS_CREATE_RULESET, _SYS_ADD_RULE, _SYS_RESTRICT_SELF = 444, 445, 446  # the same on every architecture
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH, _RULE_NET_PORT = 1, 2

EXECUTE, WRITE_FILE, READ_FILE, READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
_REMOVE_DIR, _REMOVE_FILE, _MAKE_CHAR, _MAKE_DIR = 1 << 4, 1 << 5, 1 << 6, 1 << 7
_MAKE_REG, _MAKE_SOCK, _MAKE_FIFO, _MAKE_BLOCK, _MAKE_SYM = 1 << 8, 1 << 9, 1 << 10, 1 << 11, 1 << 12
_REFER, TRUNCATE, IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15
_NET_BIND_TCP, _NET_CONNECT_TCP = 1 << 0, 1 << 1
_SCOPE_ABSTRACT_UNIX, _SCOPE_SIGNAL = 1 << 0, 1 << 1

READ = EXECUTE | READ_FILE | READ_DIR
DEVICE = READ_FILE | WRITE_FILE | TRUNCATE
GPU_DEVICE = READ_FILE | READ_DIR | WRITE_FILE | IOCTL_DEV
_FILE_RIGHTS = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64), ("scoped", ctypes.c_uint64)]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def abi() -> int:
    """The kernel's Landlock ABI version, 0 where there is none (or a seccomp profile hides it)."""
    if sys.platform != "linux":
        return 0
    return max(int(libc().syscall(_SYS_CREATE_RULESET, None, ctypes.c_size_t(0), _CREATE_RULESET_VERSION)), 0)


def handled_fs(version: int) -> int:
    """Every filesystem right the kernel knows: what is not granted by a rule is refused."""
    rights = READ | WRITE_FILE | _REMOVE_DIR | _REMOVE_FILE | _MAKE_CHAR | _MAKE_DIR | _MAKE_REG
    rights |= _MAKE_SOCK | _MAKE_FIFO | _MAKE_BLOCK | _MAKE_SYM
    if version >= 2:
        rights |= _REFER
    if version >= 3:
        rights |= TRUNCATE
    if version >= 5:
        rights |= IOCTL_DEV
    return rights


def _create(fs: int, net: int, scoped: int) -> int:
    attr = _RulesetAttr(fs, net, scoped)
    size = 24 if scoped else 16 if net else 8
    return check(libc().syscall(_SYS_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), 0), "landlock_create_ruleset")


def _add_path(ruleset: int, path: str, access: int) -> None:
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return  # a path that does not exist grants nothing
    try:
        if not stat.S_ISDIR(os.fstat(fd).st_mode):
            access &= _FILE_RIGHTS
        if access:
            rule = _PathBeneathAttr(access, fd)
            check(libc().syscall(_SYS_ADD_RULE, ruleset, _RULE_PATH_BENEATH, ctypes.byref(rule), 0), f"landlock_add_rule {path}")
    finally:
        os.close(fd)


def _restrict_self(ruleset: int) -> None:
    try:
        set_no_new_privs()
        check(libc().syscall(_SYS_RESTRICT_SELF, ruleset, 0), "landlock_restrict_self")
    finally:
        os.close(ruleset)


def restrict(read: list[str] = (), write: list[str] = (), devices: dict[str, int] | None = None, deny_tcp: bool = False,
             scope_signals: bool = True, scope_abstract_unix: bool = True) -> list[str]:
    """Restrict this process and its future children: read (and execute) ``read``, do anything
    under ``write``, open ``devices`` (path -> rights) and nothing else; with ``deny_tcp`` no TCP
    bind or connect at all. Sets no_new_privs. Returns the measures that held (empty without
    Landlock); raises OSError if the kernel refuses a step."""
    version = abi()
    if version < 1:
        return []
    fs = handled_fs(version)
    net = _NET_BIND_TCP | _NET_CONNECT_TCP if deny_tcp and version >= 4 else 0
    scoped = 0
    if version >= 6:
        scoped = (_SCOPE_SIGNAL if scope_signals else 0) | (_SCOPE_ABSTRACT_UNIX if scope_abstract_unix else 0)
    ruleset = _create(fs, net, scoped)
    try:
        for path in read:
            _add_path(ruleset, path, READ & fs)
        for path in write:
            _add_path(ruleset, path, fs)
        for path, access in (devices or {}).items():
            _add_path(ruleset, path, access & fs)
    except BaseException:
        os.close(ruleset)
        raise
    _restrict_self(ruleset)
    measures = [f"landlock-fs-abi{version}"]
    if net:
        measures.append("landlock-net")
    if scoped & _SCOPE_SIGNAL:
        measures.append("landlock-scope-signal")
    if scoped & _SCOPE_ABSTRACT_UNIX:
        measures.append("landlock-scope-abstract-unix")
    return measures


def wall_off() -> bool:
    """Enter a domain of this process's own (ABI 6+), nested in the one it is in, with no path
    rule but one refused right: making a unix socket file anywhere. From then on no process outside
    it (another rank of the group, or a process that rank started, however it forks or execs) can
    ptrace it, open its /proc fds or memory, or take one of its descriptors with pidfd_getfd, and
    it can reach no abstract unix socket and signal no process outside it. So a rank's descriptors
    stay its own: none can come from another rank (SCM_RIGHTS needs a unix socket between them) and
    none can be taken by one. The files it may open otherwise are the enclosing domain's. Returns
    whether it held (no on a kernel before 6.12: nothing was restricted)."""
    if abi() < 6:
        return False
    _restrict_self(_create(_MAKE_SOCK, 0, _SCOPE_SIGNAL | _SCOPE_ABSTRACT_UNIX))
    return True


def scope_signals_only() -> bool:
    """Enter a domain that restricts nothing but signals (ABI 6+): from then on this process and
    its descendants, however they fork, can signal each other and nothing outside (a descendant
    that nests a domain of its own stays reachable from here). Returns whether it held."""
    if abi() < 6:
        return False
    _restrict_self(_create(0, 0, _SCOPE_SIGNAL))
    return True
