"""A small seccomp filter: no new namespaces, no mounts, no kernel keyrings, modules, BPF,
io_uring, Linux AIO, userfaultfd or clone(CLONE_PARENT) for the jailed tree (x86_64 and aarch64;
elsewhere it is left out). AIO contexts come from one pool of the host's (fs/aio-max-nr, 65536
events), which a tree's 256 io_setup calls took whole: every other tree and root got EAGAIN
(tests/sandbox/jail/test_jail_hostile.py).

Everything else is allowed: this is attack-surface reduction under Landlock, not the
boundary itself. ``clone3`` answers ENOSYS (its flags live in memory a filter cannot read),
so libc falls back to ``clone``, whose namespace flags are checked. Stdlib only.
"""

from __future__ import annotations

import ctypes
import errno
import os

from sandbox.jail.kernel import check, libc

_ARCHES = {  # machine -> (AUDIT_ARCH, x32 bit or 0, {name: number})
    "x86_64": (0xC000003E, 0x40000000, dict(
        unshare=272, setns=308, mount=165, umount2=166, pivot_root=155, chroot=161, move_mount=429, open_tree=428,
        fsopen=430, fsconfig=431, fsmount=432, fspick=433, mount_setattr=442, kexec_load=246, kexec_file_load=320,
        init_module=175, finit_module=313, delete_module=176, bpf=321, keyctl=250, add_key=248, request_key=249,
        userfaultfd=323, io_uring_setup=425, io_uring_enter=426, io_uring_register=427, io_setup=206, io_destroy=207,
        io_getevents=208, io_submit=209, io_cancel=210, io_pgetevents=333, swapon=167, swapoff=168,
        reboot=169, syslog=103, acct=163, open_by_handle_at=304, clone=56, clone3=435)),
    "aarch64": (0xC00000B7, 0, dict(
        unshare=97, setns=268, mount=40, umount2=39, pivot_root=41, chroot=51, move_mount=429, open_tree=428,
        fsopen=430, fsconfig=431, fsmount=432, fspick=433, mount_setattr=442, kexec_load=104, kexec_file_load=294,
        init_module=105, finit_module=273, delete_module=106, bpf=280, keyctl=219, add_key=217, request_key=218,
        userfaultfd=282, io_uring_setup=425, io_uring_enter=426, io_uring_register=427, io_setup=0, io_destroy=1,
        io_submit=2, io_cancel=3, io_getevents=4, io_pgetevents=292, swapon=224, swapoff=225,
        reboot=142, syslog=116, acct=89, open_by_handle_at=265, clone=220, clone3=435)),
}
# clone(): any CLONE_NEW* flag, and CLONE_PARENT (a child handed to the jail's own parent
# would leave the tree that the keeper ends)
_REFUSED_CLONE_FLAGS = 0x00008000 | 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000

_LD_W_ABS, _JEQ, _JGE, _JSET, _RET = 0x20, 0x15, 0x35, 0x45, 0x06
_RET_ALLOW, _RET_ERRNO = 0x7FFF0000, 0x00050000
_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER = 22, 2
_OFFSET_NR, _OFFSET_ARCH, _OFFSET_ARG0 = 0, 4, 16


class _Instruction(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]


class _Program(ctypes.Structure):
    _fields_ = [("len", ctypes.c_uint16), ("filter", ctypes.POINTER(_Instruction))]


def _program(arch: int, x32_bit: int, numbers: dict[str, int]) -> list[tuple[int, str | int, str | int, int]]:
    """(code, jump-if-true, jump-if-false, k); jumps name a label or count instructions."""
    denied = [n for name, n in numbers.items() if name not in ("clone", "clone3")]
    code: list = [(_LD_W_ABS, 0, 0, _OFFSET_ARCH), (_JEQ, 0, "eperm", arch), (_LD_W_ABS, 0, 0, _OFFSET_NR)]
    if x32_bit:
        code.append((_JGE, "eperm", 0, x32_bit))
    code += [(_JEQ, "eperm", 0, n) for n in denied]
    code += [(_JEQ, "enosys", 0, numbers["clone3"]), (_JEQ, 0, "allow", numbers["clone"]),
             (_LD_W_ABS, 0, 0, _OFFSET_ARG0), (_JSET, "eperm", "allow", _REFUSED_CLONE_FLAGS)]
    labels = {"allow": len(code), "eperm": len(code) + 1, "enosys": len(code) + 2}
    code += [(_RET, 0, 0, _RET_ALLOW), (_RET, 0, 0, _RET_ERRNO | errno.EPERM), (_RET, 0, 0, _RET_ERRNO | errno.ENOSYS)]
    resolve = lambda index, jump: labels[jump] - index - 1 if isinstance(jump, str) else jump  # noqa: E731
    return [(c, resolve(i, jt), resolve(i, jf), k) for i, (c, jt, jf, k) in enumerate(code)]


def install() -> bool:
    """Install the filter on this thread (no_new_privs must be set). False where the
    architecture is not one the filter knows."""
    machine = os.uname().machine
    if machine not in _ARCHES:
        return False
    code = _program(*_ARCHES[machine])
    instructions = (_Instruction * len(code))(*[_Instruction(*i) for i in code])
    program = _Program(len(code), instructions)
    check(libc().prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.addressof(program), 0, 0), "prctl(PR_SET_SECCOMP)")
    return True
