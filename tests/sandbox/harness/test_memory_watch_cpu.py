"""A candidate rank's host memory is bounded (sandbox/harness/memory_watch.py): at a small limit
a rank that allocates past it ends as ``crashed`` with a message that names it, the host keeps
its memory, and an honest rank at the same limit is judged as usual (timed, so the watch runs
through every stage)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
import time

import psutil
import pytest

from sandbox.evaluate import evaluate_in
from sandbox.harness.memory_watch import MemoryWatch
from tests.support import hostile_corpus as hc
from tests.support.processes import leftover_processes

BALLOON = hc.load(hc.FIXTURES / "hostile" / "host_memory_balloon.py")
HONEST = hc.load(hc.FIXTURES / "honest" / "all_reduce_no_memo.py")


def test_a_rank_over_its_memory_limit_is_stopped_and_named(local_sandbox):
    assert BALLOON.rank_memory_gib == 1
    report = evaluate_in(local_sandbox, BALLOON.source(), hc.config(BALLOON, 2))
    assert report.status == "crashed", report.message
    assert "used more than 1 GiB of host memory" in report.message and report.message.startswith("rank "), report.message
    assert "rank_memory_gib" in report.message and report.speedup is None
    assert leftover_processes(local_sandbox.marker) == []  # what it held was given back: no process of it is left
    assert not hc.orphans(local_sandbox.workdir)


def test_an_honest_rank_at_the_same_limit_is_judged_correct(local_sandbox):
    config = hc.config(HONEST, 2, rank_memory_gib=BALLOON.rank_memory_gib, timed=True)
    report = evaluate_in(local_sandbox, HONEST.source(), config)
    assert report.status == "correct", report.message
    assert report.speedup is not None


def test_default_limit_is_generous_and_fits_the_host():
    config = hc.config(HONEST, 4)
    limit = config.rank_memory_bytes()
    total = psutil.virtual_memory().total
    assert limit == int(max(min(32 * 2**30, 0.75 * total / 4), 4 * 2**30))  # 3/4 of the host shared, at least a CUDA rank's 4 GiB
    assert hc.config(HONEST, 8).rank_memory_bytes() <= limit
    assert hc.config(HONEST, 4, rank_memory_gib=2.5).rank_memory_bytes() == int(2.5 * 2**30)


CHILD = """
import os, sys, time


def hoard():
    held = [bytearray(32 * 2**20) for _ in range(40)]  # 1.25 GiB, zero-filled: resident
    time.sleep(30)


def hoard_in_a_memory_file():  # 1.25 GiB written to a memfd never mapped: resident in no process
    fd = os.memfd_create("hoard")
    chunk = b"z" * (32 * 2**20)
    for _ in range(40):
        os.write(fd, chunk)
    time.sleep(30)


def hoard_in_a_mapped_memory_file():  # 1.25 GiB in memfds, each kept by a one-page mapping, its descriptor closed
    import ctypes
    import mmap
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    chunk = b"z" * (32 * 2**20)
    for _ in range(40):
        fd = os.memfd_create("hoard")
        os.write(fd, chunk)
        libc.mmap(None, 4096, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        os.close(fd)
    time.sleep(30)


def map_the_parents_file():  # a page of a memory file the parent holds (argv: its /proc path), as a CPU rank maps its inputs
    import mmap
    fd = os.open(sys.argv[2], os.O_RDONLY)
    kept = mmap.mmap(fd, 4096, prot=mmap.PROT_READ)
    os.close(fd)
    time.sleep(30)


def hoard_page_tables():  # the zero page mapped read-only over 96 GiB: ~190 MiB of page tables, hardly any resident memory
    import ctypes
    import mmap
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    size = 96 * 2**30
    address = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | 0x4000, -1, 0)  # MAP_NORESERVE
    libc.madvise(ctypes.c_void_p(address), ctypes.c_size_t(size), 22)  # MADV_POPULATE_READ
    time.sleep(30)


def hoard_descriptors():  # one eventfd in 3,000 slots of 10 processes: 30,000 descriptors, one kernel file
    fd = os.eventfd(0)
    for slot in range(1000, 4000):
        os.dup2(fd, slot)
    for _ in range(9):
        if os.fork() == 0:
            break
    time.sleep(30)


if sys.argv[1] == "direct":
    hoard()
elif sys.argv[1] == "memfd":
    hoard_in_a_memory_file()
elif sys.argv[1] == "mapped_memfd":
    hoard_in_a_mapped_memory_file()
elif sys.argv[1] == "parents_file":
    map_the_parents_file()
elif sys.argv[1] == "page_tables":
    hoard_page_tables()
elif sys.argv[1] == "descriptors":
    hoard_descriptors()
elif os.fork() == 0:  # the memory is held by a grandchild that left its parent: a stray of the tree
    if os.fork() == 0:
        hoard()
    os._exit(0)
else:
    os.wait()
    time.sleep(30)
"""
ROOT = """
import ctypes, subprocess, sys
ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER, as a jail's init: orphans stay in the tree
subprocess.run([sys.executable, "-m", "sandbox.rank"], cwd=sys.argv[1])
"""


@contextlib.contextmanager
def _rank_tree(tmp_path, script: str, *args: str):
    """A plain process tree shaped as a jail's, root -> zygote (``-m sandbox.rank``) -> one rank
    running ``script`` with ``args``; yields the root's process, and ends the whole tree after."""
    (tmp_path / "sandbox").mkdir()
    (tmp_path / "sandbox" / "__init__.py").write_text("")
    (tmp_path / "sandbox" / "rank.py").write_text(
        f"import subprocess, sys\nsubprocess.run([sys.executable, '-c', {script!r}, *{list(args)!r}])\n")
    root = subprocess.Popen([sys.executable, "-c", ROOT, str(tmp_path)], start_new_session=True)
    try:
        yield root
    finally:
        for process in psutil.Process(root.pid).children(recursive=True):
            try:
                process.kill()
            except psutil.Error:
                pass
        root.kill()
        root.wait()


def _resident(process: psutil.Process) -> int:
    """Resident memory and page tables, or as many descriptors as bytes: what each case holds."""
    try:
        with open(f"/proc/{process.pid}/status") as handle:
            fields = dict(line.split(":", 1) for line in handle if ":" in line)
        return (int(fields["VmRSS"].split()[0]) + int(fields["VmPTE"].split()[0])) * 1024 + process.num_fds() * 2**20
    except (OSError, KeyError, ValueError, psutil.Error):
        return 0


@pytest.mark.parametrize("how", ["direct", "memfd", "mapped_memfd", "fork", "page_tables", "descriptors"])
def test_the_watch_stops_a_tree_over_the_limit(how, tmp_path, monkeypatch):
    """The watch on a rank tree (``_rank_tree``) whose memory is its own, in a memory file it holds
    (or maps a page of, its descriptor closed), that of a process that left it, or its page tables
    (a red-team round held 1.25 GiB of them unseen); or whose processes hold more descriptors than
    a scan reads (8 million of them kept the watch reading for minutes)."""
    from sandbox.harness import memory_watch

    monkeypatch.setattr(memory_watch, "MAX_DESCRIPTORS", 20_000)
    limit = 128 * 2**20 if how == "page_tables" else 512 * 2**20
    said: list[str] = []
    done = threading.Event()
    with _rank_tree(tmp_path, CHILD, how) as root:
        watch = MemoryWatch(root.pid, 1, limit, lambda message: (said.append(message), done.set())).start()
        try:
            assert done.wait(30), "the watch never stopped the tree"
            if how == "descriptors":
                assert said[0].startswith("the candidate's processes held more than 20000 descriptors"), said
            else:
                who = "processes the candidate started outside its ranks" if how == "fork" else "rank 0"
                assert said[0].startswith(f"{who} used more than {limit / 2**30:g} GiB of host memory"), said
            time.sleep(0.5)
            holders = [p for p in psutil.Process(root.pid).children(recursive=True) if _resident(p) > 64 * 2**20]
            assert not holders, holders
        finally:
            watch.stop()


def test_a_memory_file_the_parent_holds_is_not_the_rank_s(tmp_path):
    """The control of ``mapped_memfd``: a CPU rank maps its staged inputs, memory files the parent
    made and holds; a rank that maps a page of 768 MiB of them is not stopped at 512 MiB."""
    held = os.memfd_create("kloop-staged")
    os.ftruncate(held, 768 * 2**20)
    os.posix_fallocate(held, 0, 768 * 2**20)
    said: list[str] = []
    try:
        with _rank_tree(tmp_path, CHILD, "parents_file", f"/proc/{os.getpid()}/fd/{held}") as root:
            watch = MemoryWatch(root.pid, 1, 512 * 2**20, said.append).start()
            try:
                deadline = time.monotonic() + 20
                while time.monotonic() < deadline and not any("parents_file" in " ".join(p.cmdline())
                                                              for p in psutil.Process(root.pid).children(recursive=True)):
                    time.sleep(0.1)
                time.sleep(3)  # three scans
                assert said == []
            finally:
                watch.stop()
    finally:
        os.close(held)


WRITER = """
import os, sys, time
chunk = os.urandom(2**20)
with open("visible.bin", "wb") as visible:
    visible.write(chunk * 96)
hidden = open("hidden.bin", "wb")
hidden.write(chunk * int(sys.argv[1]))
hidden.flush()
os.unlink("hidden.bin")
time.sleep(30)
"""


@pytest.mark.parametrize("hidden_mib, stopped", [(96, True), (8, False)])
def test_the_watch_adds_up_the_work_folder_and_the_deleted_files_held_open(hidden_mib, stopped, tmp_path):
    """A rank's visible files under the limit, and as much again in a file it deleted and holds
    open: the group is stopped, with a message that says why; the control holds less."""
    said: list[str] = []
    done = threading.Event()
    with _rank_tree(tmp_path, WRITER, str(hidden_mib)) as root:
        watch = MemoryWatch(root.pid, 1, 8 * 2**30, lambda message: (said.append(message), done.set()),
                            workdir=(str(tmp_path), 160 * 2**20)).start()
        try:
            assert done.wait(8) is stopped, said
            if stopped:
                assert said[0].startswith("the candidate's processes wrote more than 0.15625 GiB to its work folder"), said
                assert "workdir_gib" in said[0]
                time.sleep(0.5)
                assert not [p for p in psutil.Process(root.pid).children(recursive=True) if "time.sleep" in " ".join(p.cmdline())]
        finally:
            watch.stop()


def test_a_work_folder_of_too_many_entries_counts_as_full(tmp_path, monkeypatch):
    from sandbox.harness import folder_usage

    for index in range(30):
        (tmp_path / f"f{index}").write_bytes(b"x")
    assert folder_usage.folder_bytes(str(tmp_path))[1] == 30
    monkeypatch.setattr(folder_usage, "MAX_ENTRIES", 10)
    said: list[str] = []
    root = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])  # a tree of one: nothing of it to stop
    try:
        watch = MemoryWatch(root.pid, 1, 2**30, said.append, workdir=(str(tmp_path), 2**30))
        assert watch.check_workdir() and "more than 10 files and folders" in said[0]
    finally:
        root.kill()
        root.wait()


def test_a_quiet_watch_reads_nothing_while_its_group_is_stopped(monkeypatch):
    """HOSTILE (a red-team idea of 2026-12-07): the watch reads every descriptor of the group each
    RESCAN_S (20,000 held by one process took 0.064 s a read on a two-core host), also while the
    group is stopped and the reference timed; a group holding hundreds of thousands would have the
    parent burn a core beside the reference. RankGroup.paused keeps the watch quiet meanwhile;
    control: it reads again once the block ends."""
    from sandbox.harness import memory_watch

    scans: list[float] = []
    monkeypatch.setattr(MemoryWatch, "_scan", lambda self: scans.append(time.monotonic()))
    root = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    watch = MemoryWatch(root.pid, 1, 2**30, lambda reason: None).start()
    try:
        with watch.quiet():
            time.sleep(memory_watch.POLL_S * 2)  # a read under way as the block began ends
            before = len(scans)
            time.sleep(2.5 * memory_watch.RESCAN_S)
            assert len(scans) == before
        time.sleep(2.5 * memory_watch.RESCAN_S)
        assert len(scans) > before
    finally:
        watch.stop()
        root.kill()
        root.wait()
