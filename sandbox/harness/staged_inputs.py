"""Input integrity, judged from memory the parent holds rather than from what a rank says.

On the CPU the parent stages each call's inputs, for either group, as its own writable copy of
the reference's sealed blob (``wire.shared_copy``): the rank's input tensors are views of that
file, so whatever the solution writes into them lands in memory the parent reads. Right after a
call ends (its ``done`` or ``burst_done``), the parent compares each rank's copy with the sealed
original, tensor by tensor, before the rank is asked anything else; on a checked call, a
difference where the reference leaves its inputs alone is ``wrong``, and the verdict names the
rank, the input and the call. A rank cannot talk its way out of it: its commitment and its revealed bytes are not
consulted (tests/fixtures/hostile/mutate_input_scratch.py patches both). What is left to a rank is
to copy its inputs before writing them (the copy it meant to save, paid in the timed call or in
staging, which the clock checks against the reference's), or to undo a write after its answer and
before the parent's read (a race it must win on every checked call, for no time saved).

Nothing the parent does to a call's copy may tell the rank whether that call is checked (a
secret sample of the timed calls is; tests/fixtures/hostile/checked_call_atime.py read it from the
atime that mapping a memfd sets, and a rank can see too how long the parent takes before its next
command). So the parent maps every copy once, read-only, when it stages it (:class:`StagedRound`),
and after *every* call of the candidate compares that call's every input through that mapping
(reads through a mapping made earlier leave atime alone) and reads the rank tree's mappings (below);
the result counts only where the call is checked.

A write has to reach the file for the parent to see it: a rank that maps its staged copy again
MAP_PRIVATE at the same address keeps its tensor views valid while its writes land in
copy-on-write pages of its own (tests/fixtures/hostile/mutate_input_private_remap.py). So after
every call the parent also reads /proc/<pid>/maps of every process in the candidate group's tree
(on the host, outside the jail, where a rank cannot alter what is read) and refuses any private
mapping of a staged copy (:func:`private_mappings`, by device and inode, which the rank cannot
forge), as a protocol violation. What that leaves a rank is again to copy: into memory of its
own (paid in staging or in the call, which the clock checks); a private mapping is no cheaper
than that copy (each page written is copied on its fault), and one dropped before the rank
answers takes with it what was written there, unless that was copied out first. A process whose
maps the parent cannot read (never, for a root parent) is passed over with a warning.

On a GPU the inputs are the rank's own device memory; there the judge still compares the bytes a
rank reveals (sandbox/harness/judge.py), which a rank that rewrites the harness can forge.
"""

from __future__ import annotations

import mmap
import os
import warnings
from dataclasses import dataclass, field

import psutil
import structlog

from sandbox.harness.calls import MAX_EXPECTED_BYTES, Call
from sandbox.harness.verdict import Verdict
from sandbox.jail.tree import descendants
from sandbox.rank import input_mask, wire
from sandbox.report import Mismatch, RankVerdict

log = structlog.get_logger(__name__)
_UNREADABLE: set[int] = set()  # pids already warned of


@dataclass
class StagedRound:
    """A round's copies on the CPU: ``fds[rank][call]``, each mapped read-only once, right here
    (``views[rank][call]``), and their files' (device, inode), to know them in a rank's maps."""

    fds: list[list[int]] = field(default_factory=list)
    views: list[list[mmap.mmap]] = field(default_factory=list)
    files: set[tuple[int, int]] = field(default_factory=set)

    def close(self) -> None:
        for views in self.views:
            for view in views:
                view.close()
        close_copies(self.fds)
        self.views, self.fds = [], []


def stage_copies(calls: list[Call], world: int) -> StagedRound:
    """A fresh shared copy of every call's inputs on every rank, masked until its call as a
    device blob's are (sandbox/rank/input_mask.py: the rank removes the mask, in this very file,
    with the key its call's message brings), and mapped by the parent now: every later read goes
    through that mapping, the same for a checked call as for any other."""
    staged = StagedRound()
    try:
        for rank in range(world):
            staged.fds.append([])
            staged.views.append([])
            for call in calls:
                fd = wire.shared_copy(call.inputs[rank].blob, MAX_EXPECTED_BYTES)
                staged.fds[rank].append(fd)
                mask_copy(fd, call.mask, rank)
                found = os.fstat(fd)
                staged.files.add((found.st_dev, found.st_ino))
                staged.views[rank].append(mmap.mmap(fd, found.st_size, prot=mmap.PROT_READ))  # a blob is never empty
    except BaseException:
        staged.close()
        raise
    return staged


def mask_copy(fd: int, key: int, rank: int) -> None:
    """Mask (or unmask: the mask is its own inverse) the tensors of the shared copy ``fd`` in place
    with rank ``rank``'s keystream of ``key``."""
    import torch

    with wire.Blob(fd, MAX_EXPECTED_BYTES, shared=True) as blob:
        tensors = blob.tensors()
        input_mask.apply(torch, tensors, key, rank)
        del tensors


def close_copies(copies: list[list[int]]) -> None:
    for fds in copies:
        for fd in fds:
            try:
                os.close(fd)
            except OSError:
                pass


def changed_inputs(original_fd: int, staged: mmap.mmap, skip: set[int]) -> list[tuple[int, int, int]]:
    """``(input index, bytes that differ, bytes)`` of every input tensor of a call whose staged
    copy (``staged``: the parent's mapping of it) no longer holds what the reference made, leaving
    out those in ``skip``. Every tensor is compared, ``skip`` or not: the time this takes must not
    depend on the call being checked."""
    import torch

    changed = []
    with wire.Blob(original_fd, MAX_EXPECTED_BYTES) as blob:
        if len(staged) != blob.size:  # cannot happen to a copy sealed against resizing; said rather than assumed
            return [(index, spec["nbytes"], spec["nbytes"]) for index, spec in enumerate(blob.specs) if index not in skip]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # read-only buffers: only read here
            for index, spec in enumerate(blob.specs):
                if not spec["nbytes"]:
                    continue
                start = blob.data_start + spec["offset"]
                before = torch.frombuffer(blob.map, dtype=torch.uint8, count=spec["nbytes"], offset=start)
                after = torch.frombuffer(staged, dtype=torch.uint8, count=spec["nbytes"], offset=start)
                if not torch.equal(before, after):
                    differ = int((before != after).sum())  # counted in ``skip`` too: the same work either way
                    if index not in skip:
                        changed.append((index, differ, spec["nbytes"]))
                del before, after
    return changed


def check_inputs(calls: list[Call], staged: list[list[mmap.mmap]], in_place: bool) -> None:
    """Raise a ``wrong`` verdict at the first checked call (one the reference gave expectations
    for) whose inputs a rank changed; ``staged[rank][i]`` (the parent's mapping of the copy)
    belongs to ``calls[i]``. Every call's inputs are compared alike; only a checked call's result
    counts. The inputs the reference itself updates (every one, for an in-place problem) are
    judged as outputs instead."""
    if in_place:
        return
    for position, call in enumerate(calls):
        for rank, expected in enumerate(call.expected):
            changed = changed_inputs(call.inputs[rank].blob, staged[rank][position], set(expected.mutated) if expected else set())
            if changed and expected is not None:
                raise input_changed(call, rank, changed, len(call.expected))


class PrivateMapping(Exception):
    """A process of the candidate's tree maps a staged copy privately (copy-on-write)."""


def private_mappings(root_pid: int, files: set[tuple[int, int]]) -> list[str]:
    """``pid: maps line`` of every private mapping of a file in ``files`` (device, inode) held by
    a process under ``root_pid`` (the candidate group's jail), read from the host's /proc. A
    process that ends while being read is passed over (its mappings went with it)."""
    if not files:
        return []
    inodes = {str(inode).encode() for _, inode in files}
    found = []
    for process in _tree(root_pid):
        try:
            with open(f"/proc/{process.pid}/maps", "rb") as handle:  # paths are the candidate's bytes, not always UTF-8
                lines = handle.readlines()
        except (FileNotFoundError, ProcessLookupError):
            continue
        except PermissionError:  # never for a parent that is root, or owns the jail's user namespace
            if process.pid not in _UNREADABLE:
                _UNREADABLE.add(process.pid)
                log.warning("maps_unreadable", pid=process.pid, why="cannot check this process for private input mappings")
            continue
        for line in lines:
            parts = line.split(maxsplit=5)
            if len(parts) < 5 or parts[4] not in inodes or parts[1][3:4] == b"s":
                continue
            major, _, minor = parts[3].partition(b":")
            if (os.makedev(int(major, 16), int(minor, 16)), int(parts[4])) in files:
                found.append(f"{process.pid}: {line.strip().decode(errors='backslashreplace')}"[:300])
    return found


def check_mappings(root_pid: int, files: set[tuple[int, int]]) -> None:
    """Raise PrivateMapping when the candidate's tree maps a staged copy privately."""
    found = private_mappings(root_pid, files)
    if found:
        log.info("staged_input_mapped_private", count=len(found), first=found[0])
        raise PrivateMapping(f"a rank mapped its staged inputs privately (copy-on-write), so that what it writes to them never "
                             f"reaches the memory the harness shares with it and checks ({len(found)} such mappings; "
                             f"first: {found[0]})")


def _tree(root_pid: int) -> list[psutil.Process]:
    try:
        return [psutil.Process(root_pid), *descendants(root_pid)]
    except psutil.Error:
        return descendants(root_pid)


def input_changed(call: Call, rank: int, changed: list[tuple[int, int, int]], world: int) -> Verdict:
    index, differ, total = changed[0]
    detail = (f"rank {rank} changed its input tensor {index} during call {call.label} ({differ} of {total} bytes differ from what "
              "was staged)")
    more = f"; inputs {', '.join(str(c[0]) for c in changed[1:])} too" if len(changed) > 1 else ""
    message = (f"{detail}{more}: a solution must not write its inputs (this problem's reference leaves them unchanged); "
               "the harness compared the memory it shared with the rank, not what the rank reported")
    ranks = [RankVerdict(rank=r, ok=r != rank, message=detail if r == rank else "") for r in range(world)]
    return Verdict("wrong", message, ranks=ranks,
                   mismatch=Mismatch(rank=rank, trial=call.label, output_index=index, kind="input_modified", detail=detail))
