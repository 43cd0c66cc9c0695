"""A candidate group's host memory, watched from the parent: a rank whose processes together hold
more than the limit is stopped, and the verdict says so.

RLIMIT_AS cannot bound a rank (CUDA reserves address space far beyond what it uses), and the
jail has no cgroup of its own to account in; so the parent reads, every ``POLL_S``, the resident
memory of each rank's processes (the rank and whatever it forked, found again every
``RESCAN_S``) on the host's /proc, where a rank cannot alter what is read. A rank over the limit
is killed with everything it forked (SIGKILL from the parent), and the group's ``stopped_for``
names it: the evaluation ends as ``crashed`` with "rank N used more than X GiB of host memory"
instead of the host running out of memory. Processes the candidate started that left their rank
(a double fork reparents to the jail's init) are counted together, against the same limit.

What is counted is resident memory (RSS): the rank's own pages and those of files it maps,
shared libraries included (a few hundred MiB for torch), so the limit is meant to be generous
(``HarnessConfig.rank_memory_gib``); its page tables (VmPTE: 640 GiB of the zero page mapped
read-only took 1.25 GiB of them with 14 MiB resident); plus the memory files (memfd) its
processes hold open or map (through /proc/PID/map_files: as root), which need not be resident in
any process (a mapped one may count twice). A group whose processes hold more than
MAX_DESCRIPTORS descriptors and mappings between them is stopped: reading them is the watch's own
cost, and it was made to take minutes. Files a rank writes to the jail's private /tmp or /dev/shm
are bounded by their tmpfs size (sandbox/jail/spec.py). Not seen: memory held where no process of
the tree names it (socket and pipe buffers, a descriptor in flight on a socket, System V shared
memory, which the jail bounds as it bounds /dev/shm where it may: sandbox/jail/init.py); a memory cgroup per
group would bound those too.

The group's work folder, the one host folder it may write, has no such bound of its own (a file
may be 16 GiB, and there may be any number of them: the host's disk, or its memory where the
folder is on a tmpfs). So every ``RESCAN_S`` the watch also adds up what the folder holds (blocks
allocated, so a sparse file counts what it really takes), with the files on its filesystem that a
process of the group deleted and still holds open; over the limit (``HarnessConfig.workdir_gib``),
or with more than ``folder_usage.MAX_ENTRIES`` entries to count, the whole group is killed and the
verdict says why; the pipeline checks once more before a verdict of ``correct``
(tests/fixtures/hostile/fill_the_work_folder.py).
"""

from __future__ import annotations

import contextlib
import os
import stat
import threading
from collections.abc import Iterator
from typing import Callable

import psutil
import structlog

from sandbox.harness import folder_usage
from sandbox.jail.tree import children, descendants

log = structlog.get_logger(__name__)

POLL_S = 0.1
RESCAN_S = 1.0
# descriptors read in one scan of a group's processes: 400 processes sharing 20,000 descriptors each (one eventfd dup'd
# into every slot: a single kernel file) had each scan read 8 million, the watch's thread busy for minutes with no memory
# check in between while the ranks held 3 GiB over their 1 GiB limit (a red-team round, 2026-12-07)
MAX_DESCRIPTORS = 200_000  # and lines of /proc/PID/maps: a rank of torch on a GPU maps a few thousand
RANK_MARKER = "sandbox.rank"  # in the command line of the candidate's zygote, and so of every rank it forks
GIB = 2**30


class MemoryWatch:
    """Watches the tree under ``root_pid`` (a candidate group's jail) until :meth:`stop`; calls
    ``on_exceeded(message)`` once, after stopping the offender."""

    def __init__(self, root_pid: int, world: int, limit_bytes: int, on_exceeded: Callable[[str], None],
                 workdir: tuple[str, int] | None = None):
        """``workdir``: the group's work folder and the bytes it may hold, when those are watched too."""
        self.root_pid, self.world, self.limit_bytes = root_pid, world, limit_bytes
        self.on_exceeded = on_exceeded
        self.workdir = workdir
        self.peak_bytes = [0] * world
        self._ranks: list[psutil.Process] = []
        self._trees: list[list[psutil.Process]] = []
        self._strays: list[psutil.Process] = []
        self._held: list[int] = [0] * world  # memory files held open, per rank's tree (bytes), at the last scan
        self._strays_held = 0
        self._stop = threading.Event()
        self._quiet = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kloop-memory-watch", daemon=True)

    def start(self) -> "MemoryWatch":
        self._thread.start()
        return self

    @contextlib.contextmanager
    def quiet(self) -> Iterator[None]:
        """No reads of the group for the block, which the caller runs with every process of the
        group stopped (nothing of it can grow meanwhile): the reads cost the parent CPU time in
        proportion to what the group holds, descriptors most (about 3 ms a thousand), and a group
        stopped while the reference is timed holding tens of thousands of them would have the
        watch burn a core beside the reference's calls."""
        self._quiet.set()
        try:
            yield
        finally:
            self._quiet.clear()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(2.0)

    # ---------------------------------------------------------------- the loop
    def _run(self) -> None:
        scanned = -RESCAN_S
        elapsed = 0.0
        while not self._stop.wait(POLL_S):
            if self._quiet.is_set():
                continue
            elapsed += POLL_S
            try:
                if elapsed - scanned >= RESCAN_S:
                    if self._scan():
                        return
                    scanned = elapsed
                    if self.check_workdir():
                        return
                if self._check():
                    return
            except Exception as error:  # noqa: BLE001 - a watch that fails must not end the evaluation
                log.warning("memory watch failed", error=f"{type(error).__name__}: {error}")
                return

    def _scan(self) -> bool:
        """Find the ranks (the zygote's children, in the order it forked them) and what each forked,
        and the memory files they hold; whether the group was stopped for its descriptors."""
        everyone = descendants(self.root_pid)
        if not everyone:
            return False
        if len(self._ranks) < self.world:
            zygote = next((p for p in everyone if _is_rank_process(p) and not _is_rank_process(_parent(p))), None)
            if zygote is None:
                return False
            try:
                ranks = sorted(children(zygote.pid), key=lambda p: (p.create_time(), p.pid))
            except psutil.Error:
                return False
            if len(ranks) < self.world:
                return False
            self._ranks = ranks[:self.world]
        trees = []
        for rank in self._ranks:
            trees.append([rank, *descendants(rank.pid)] if rank.is_running() else [])
        self._trees = trees
        counted = {p.pid for tree in trees for p in tree} | _ancestors(self._ranks)  # the jail's own processes, the zygote
        self._strays = [p for p in everyone if p.pid not in counted]
        budget, parents = [MAX_DESCRIPTORS], _own_memory_files()
        try:
            self._held = [_held_files(tree, budget, parents) for tree in trees]
            self._strays_held = _held_files(self._strays, budget, parents)
        except TooManyDescriptors as error:
            self._exceeded_descriptors(everyone, str(error))
            return True
        return False

    def _check(self) -> bool:
        for rank, tree in enumerate(self._trees):
            used = _resident(tree) + self._held[rank]
            self.peak_bytes[rank] = max(self.peak_bytes[rank], used)
            if used > self.limit_bytes:
                self._exceeded(f"rank {rank}", tree, used)
                return True
        used = _resident(self._strays) + self._strays_held
        if used > self.limit_bytes:
            self._exceeded("processes the candidate started outside its ranks", self._strays, used)
            return True
        return False

    def check_workdir(self) -> bool:
        """Whether the work folder is over its limit (the group then stopped and ``on_exceeded``
        told): every RESCAN_S from the watch's thread, and once more when an evaluation ends,
        which a short one may do between two of those."""
        if self.workdir is None:
            return False
        folder, limit = self.workdir
        everyone = descendants(self.root_pid)  # found now: the last scan may be older than what was written since
        used, entries = folder_usage.folder_bytes(folder)
        if entries <= folder_usage.MAX_ENTRIES:
            try:
                used += _deleted_files_held(everyone, folder)
            except TooManyDescriptors as error:
                self._exceeded_descriptors(everyone, str(error))
                return True
            if used <= limit:
                return False
            what = f"more than {limit / GIB:g} GiB to its work folder ({used / GIB:.2f} GiB"
        else:
            what = f"more than {folder_usage.MAX_ENTRIES} files and folders to its work folder ({entries} counted"
        message = (f"the candidate's processes wrote {what}, with the files they deleted and still held open, when the harness "
                   "stopped them; the limit is workdir_gib in the harness config)")
        log.info("candidate over its work folder limit", used_bytes=used, entries=entries, limit_bytes=limit)
        self.on_exceeded(message)
        for process in everyone:
            try:
                process.kill()
            except psutil.Error:
                pass
        return True

    def _exceeded_descriptors(self, everyone: list[psutil.Process], why: str) -> None:
        log.info("candidate over its descriptor limit", why=why)
        self.on_exceeded(f"the candidate's processes {why} when the harness stopped them (a group may hold at most "
                         f"{MAX_DESCRIPTORS} between its processes)")
        for process in everyone:
            try:
                process.kill()
            except psutil.Error:
                pass

    def _exceeded(self, who: str, tree: list[psutil.Process], used: int) -> None:
        message = (f"{who} used more than {self.limit_bytes / GIB:g} GiB of host memory ({used / GIB:.2f} GiB resident when "
                   "the harness stopped it; the limit per rank is rank_memory_gib in the harness config)")
        log.info("candidate over its memory limit", who=who, used_bytes=used, limit_bytes=self.limit_bytes)
        self.on_exceeded(message)  # first: whoever sees the rank die must find the reason already there
        for process in tree:
            try:
                process.kill()  # psutil refuses a pid that was reused since it was found
            except psutil.Error:
                pass


class TooManyDescriptors(Exception):
    """A group's processes hold more descriptors than one scan reads (MAX_DESCRIPTORS)."""


def _resident(processes: list[psutil.Process]) -> int:
    """Resident memory and page tables of ``processes`` (VmRSS and VmPTE of /proc/PID/status), in bytes."""
    total = 0
    for process in processes:
        try:
            with open(f"/proc/{process.pid}/status", "rb") as handle:
                text = handle.read()
        except OSError:
            continue
        for line in text.splitlines():
            if line.startswith((b"VmRSS:", b"VmPTE:")):
                fields = line.split()
                if len(fields) >= 2 and fields[1].isdigit():
                    total += int(fields[1]) * 1024
    return total


def _descriptors(pid: int, budget: list[int]) -> list[str]:
    """The names in /proc/PID/fd, taken off ``budget[0]``; TooManyDescriptors past it."""
    try:
        names = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return []
    budget[0] -= len(names)
    if budget[0] < 0:
        raise TooManyDescriptors(f"held more than {MAX_DESCRIPTORS} descriptors")
    return names


def _held_files(processes: list[psutil.Process], budget: list[int], parents: set[tuple[int, int]] = frozenset()) -> int:
    """Bytes of the memory files (memfd) that ``processes`` hold open or map, each file once, but
    for ``parents``, the parent's own (a round's staged inputs, which a CPU rank maps): a 64 MiB
    file kept alive by a one-page mapping, its descriptor closed, counted 4 KiB of it (a red-team
    rank held 1.5 GiB so)."""
    seen, total = set(parents), 0
    for process in processes:
        folder = f"/proc/{process.pid}/fd"
        paths = [f"{folder}/{name}" for name in _descriptors(process.pid, budget) if _is_memfd(f"{folder}/{name}")]
        paths += _mapped_memory_files(process.pid, budget)
        for path in paths:
            try:
                found = os.stat(path)
            except OSError:
                continue
            if (found.st_dev, found.st_ino) not in seen:
                seen.add((found.st_dev, found.st_ino))
                total += found.st_blocks * 512
    return total


def _own_memory_files() -> set[tuple[int, int]]:
    """(device, inode) of the memory files this process (the parent) holds open."""
    found = set()
    try:
        names = os.listdir("/proc/self/fd")
    except OSError:
        return found
    for name in names:
        path = f"/proc/self/fd/{name}"
        if _is_memfd(path):
            try:
                held = os.stat(path)
            except OSError:
                continue
            found.add((held.st_dev, held.st_ino))
    return found


def _is_memfd(path: str) -> bool:
    try:
        return os.readlink(path).startswith("/memfd:")
    except OSError:
        return False


def _mapped_memory_files(pid: int, budget: list[int]) -> list[str]:
    """/proc/PID/map_files entries of the memory files ``pid`` maps, its maps' lines taken off ``budget[0]``."""
    try:
        with open(f"/proc/{pid}/maps", "rb") as handle:  # bytes: a file's name is the candidate's to choose
            lines = handle.read().splitlines()
    except OSError:
        return []
    budget[0] -= len(lines)
    if budget[0] < 0:
        raise TooManyDescriptors(f"held more than {MAX_DESCRIPTORS} descriptors and mappings")
    found = []
    for line in lines:
        fields = line.split(None, 5)
        if len(fields) == 6 and fields[5].startswith(b"/memfd:"):
            found.append(f"/proc/{pid}/map_files/{fields[0].decode('ascii', 'replace')}")
    return found


def _deleted_files_held(processes: list[psutil.Process], folder: str) -> int:
    """Bytes of the deleted files on ``folder``'s filesystem that ``processes`` hold open, each once."""
    try:
        device = os.stat(folder).st_dev
    except OSError:
        return 0
    seen, total, budget = set(), 0, [MAX_DESCRIPTORS]
    for process in processes:
        fds = f"/proc/{process.pid}/fd"
        for name in _descriptors(process.pid, budget):
            path = f"{fds}/{name}"
            try:
                if not os.readlink(path).endswith(" (deleted)"):
                    continue
                found = os.stat(path)
            except OSError:
                continue
            if found.st_dev == device and stat.S_ISREG(found.st_mode) and (found.st_dev, found.st_ino) not in seen:
                seen.add((found.st_dev, found.st_ino))
                total += found.st_blocks * 512
    return total


def _parent(process: psutil.Process) -> psutil.Process | None:
    try:
        return process.parent()
    except psutil.Error:
        return None


def _is_rank_process(process: psutil.Process | None) -> bool:
    if process is None:
        return False
    try:
        return RANK_MARKER in process.cmdline()
    except psutil.Error:
        return False


def _ancestors(ranks: list[psutil.Process]) -> set[int]:
    found: set[int] = set()
    for rank in ranks:
        try:
            found.update(p.pid for p in rank.parents())
        except psutil.Error:
            continue
    return found
