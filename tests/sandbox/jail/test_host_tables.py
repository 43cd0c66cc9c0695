"""Host-wide kernel tables a jailed tree must not take from every other tree and from root, which
a uid of its own (test_tree_uid.py) does not separate: the Linux AIO context pool
(fs/aio-max-nr, 65536 events on the host) went whole to 256 io_setup calls of one tree, and
another tree and root then got EAGAIN. The jail's seccomp filter refuses Linux AIO. System V IPC
objects belong to no process, so a tree could hold host memory in them where the parent's memory
watch does not look: the jail's IPC namespace is bounded."""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import sys
import textwrap
import time
from pathlib import Path

from sandbox.jail import Jail, JailSpec, own_uid
from sandbox.jail.init import SYSV_QUEUES
from sandbox.jail.seccomp import _ARCHES

SYSCALLS = _ARCHES[platform.machine()][2]
IO_SETUP, IO_DESTROY = SYSCALLS["io_setup"], SYSCALLS["io_destroy"]
AIO_HOG = textwrap.dedent(f"""
    import ctypes, time
    libc = ctypes.CDLL(None, use_errno=True)
    made, error = 0, 0
    while made < 100_000:
        ctx = ctypes.c_ulong(0)
        if libc.syscall({IO_SETUP}, 256, ctypes.byref(ctx)) != 0:
            error = ctypes.get_errno()
            break
        made += 1
    open("made", "w").write(f"{{made}} {{error}}")
    time.sleep(60)
""")


def _io_setup_here() -> int:
    """0, or the errno of one io_setup of a single event in this process (root, outside any jail)."""
    libc = ctypes.CDLL(None, use_errno=True)
    ctx = ctypes.c_ulong(0)
    if libc.syscall(IO_SETUP, 1, ctypes.byref(ctx)) != 0:
        return ctypes.get_errno()
    libc.syscall(IO_DESTROY, ctx)
    return 0


def test_a_tree_cannot_take_the_host_s_aio_pool(tmp_path: Path):
    folder = tmp_path / "hog"
    folder.mkdir()
    (folder / "main.py").write_text(AIO_HOG)
    with Jail.start(JailSpec(workdir=str(folder), uid=own_uid()), [sys.executable, "main.py"]) as hog:
        deadline = time.monotonic() + 60
        while not (folder / "made").exists():
            assert time.monotonic() < deadline and hog.poll() is None, "the hog never reported"
            time.sleep(0.1)
        made, error = (int(v) for v in (folder / "made").read_text().split())
        here = _io_setup_here()
    assert (made, error) == (0, errno.EPERM), (made, error)  # refused by the filter, not by an empty pool
    assert here == 0, errno.errorcode.get(here, here)


OOM_PROBE = textwrap.dedent("""
    import os
    start = open("/proc/self/oom_score_adj").read().strip()
    try:
        open("/proc/self/oom_score_adj", "w").write("0")
        lowered = "lowered"
    except OSError as error:
        lowered = f"refused ({error.errno})"
    child = os.fork()
    if child == 0:
        os._exit(0 if open("/proc/self/oom_score_adj").read().strip() == "1000" else 1)
    _, status = os.waitpid(child, 0)
    open("said", "w").write(f"{start} {lowered} {os.waitstatus_to_exitcode(status)}")
""")


def test_a_tree_is_first_for_the_oom_killer_and_cannot_step_back(tmp_path: Path):
    """Memory the parent's watch cannot see (socket buffers, SysV segments) would have the kernel's
    OOM killer choose by resident memory: the harness or a reference as likely as the tree. Every
    process of a tree starts at oom_score_adj 1000, and under root cannot lower it."""
    folder = tmp_path / "probe"
    folder.mkdir()
    (folder / "main.py").write_text(OOM_PROBE)
    with Jail.start(JailSpec(workdir=str(folder), uid=own_uid()), [sys.executable, "main.py"]) as jail:
        assert jail.wait(60) == 0
        assert "oom-first" in jail.measures
    said = (folder / "said").read_text()
    assert said.startswith("1000 ") and said.endswith(" 0"), said
    if os.geteuid() == 0:
        assert "refused" in said, said


SEGMENT_BYTES = 32 * 2**20
SYSV_HOG = textwrap.dedent(f"""
    import ctypes, time
    libc = ctypes.CDLL(None, use_errno=True)
    libc.shmat.restype = ctypes.c_void_p
    libc.shmat.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int]
    libc.shmdt.argtypes = [ctypes.c_void_p]
    held, shm_error = 0, 0
    while held < 2**30:  # segments of 32 MiB, each filled and detached: resident in no process, held by the namespace
        segment = libc.shmget(0, {SEGMENT_BYTES}, 0o1600)
        if segment < 0:
            shm_error = ctypes.get_errno()
            break
        address = libc.shmat(segment, None, 0)
        ctypes.memset(address, 1, {SEGMENT_BYTES})
        libc.shmdt(address)
        held += {SEGMENT_BYTES}
    queues, msg_error = 0, 0
    while queues < 2000:
        if libc.msgget(0, 0o1600) < 0:
            msg_error = ctypes.get_errno()
            break
        queues += 1
    open("made", "w").write(f"{{held}} {{shm_error}} {{queues}} {{msg_error}}")
""")


def test_a_tree_holds_no_more_system_v_ipc_than_its_tmpfs_size(tmp_path: Path):
    """A tree filled 1 GiB of SysV shared memory (32 MiB segments, each detached: no process maps
    it) and made 2000 message queues; now its IPC namespace stops it at its tmpfs size (64 MiB
    here, as its /dev/shm) and SYSV_QUEUES queues. The host's own namespace (root here, outside any
    jail) is untouched: 128 MiB there."""
    folder = tmp_path / "hog"
    folder.mkdir()
    (folder / "main.py").write_text(SYSV_HOG)
    bound = 2 * SEGMENT_BYTES
    with Jail.start(JailSpec(workdir=str(folder), uid=own_uid(), tmpfs_bytes=bound), [sys.executable, "main.py"]) as hog:
        assert hog.wait(60) == 0
        measures = hog.measures
    held, shm_error, queues, msg_error = (int(v) for v in (folder / "made").read_text().split())
    assert held == bound and shm_error == errno.ENOSPC, (held, errno.errorcode.get(shm_error, shm_error))
    assert queues == SYSV_QUEUES and msg_error == errno.ENOSPC, (queues, errno.errorcode.get(msg_error, msg_error))
    assert "sysv-ipc-bounded" in measures
    libc = ctypes.CDLL(None, use_errno=True)
    segment = libc.shmget(0, 4 * SEGMENT_BYTES, 0o1600)
    assert segment >= 0, errno.errorcode.get(ctypes.get_errno())
    assert libc.shmctl(segment, 0, None) == 0  # IPC_RMID
