"""Input integrity, judged from memory the parent holds rather than from what a rank says.

On the CPU the parent stages each call's inputs, for either group, as its own writable copy of
the reference's sealed blob (``wire.shared_copy``): the rank's input tensors are views of that
file, so whatever the solution writes into them lands in memory the parent reads. Right after a
checked call ends (its ``done`` or ``burst_done``), the parent compares each rank's copy with the
sealed original, tensor by tensor, before the rank is asked anything else; a difference where the
reference leaves its inputs alone is ``wrong``, and the verdict names the rank, the input and the
call. A rank cannot talk its way out of it: its commitment and its revealed bytes are not
consulted (tests/fixtures/hostile/mutate_input_scratch.py patches both). What is left to a rank is
to copy its inputs before writing them (the copy it meant to save, paid in the timed call or in
staging, which the clock checks against the reference's), or to undo a write after its answer and
before the parent's read (a race it must win on every checked call, for no time saved).

On a GPU the inputs are the rank's own device memory; there the judge still compares the bytes a
rank reveals (sandbox/harness/judge.py), which a rank that rewrites the harness can forge.
"""

from __future__ import annotations

import mmap
import os
import warnings

from sandbox.harness.calls import MAX_EXPECTED_BYTES, Call
from sandbox.harness.verdict import Verdict
from sandbox.rank import wire
from sandbox.report import Mismatch, RankVerdict


def stage_copies(calls: list[Call], world: int) -> list[list[int]]:
    """``copies[rank][call]``: a fresh shared copy of every call's inputs on every rank."""
    copies: list[list[int]] = []
    try:
        for rank in range(world):
            copies.append([])
            for call in calls:
                copies[rank].append(wire.shared_copy(call.inputs[rank], MAX_EXPECTED_BYTES))
    except BaseException:
        close_copies(copies)
        raise
    return copies


def close_copies(copies: list[list[int]]) -> None:
    for fds in copies:
        for fd in fds:
            try:
                os.close(fd)
            except OSError:
                pass


def changed_inputs(original_fd: int, copy_fd: int, skip: set[int]) -> list[tuple[int, int, int]]:
    """``(input index, bytes that differ, bytes)`` of every input tensor of a call whose staged
    copy no longer holds what the reference made, leaving out those in ``skip``."""
    import torch

    changed = []
    with wire.Blob(original_fd, MAX_EXPECTED_BYTES) as blob:
        size = os.fstat(copy_fd).st_size
        if size != blob.size:  # cannot happen to a copy sealed against resizing; said rather than assumed
            return [(index, spec["nbytes"], spec["nbytes"]) for index, spec in enumerate(blob.specs) if index not in skip]
        with mmap.mmap(copy_fd, size, prot=mmap.PROT_READ) as staged, warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # read-only buffers: only read here
            for index, spec in enumerate(blob.specs):
                if index in skip or not spec["nbytes"]:
                    continue
                start = blob.data_start + spec["offset"]
                before = torch.frombuffer(blob.map, dtype=torch.uint8, count=spec["nbytes"], offset=start)
                after = torch.frombuffer(staged, dtype=torch.uint8, count=spec["nbytes"], offset=start)
                if not torch.equal(before, after):
                    changed.append((index, int((before != after).sum()), spec["nbytes"]))
                del before, after
    return changed


def check_inputs(calls: list[Call], copies: list[list[int]], in_place: bool) -> None:
    """Raise a ``wrong`` verdict at the first checked call (one the reference gave expectations
    for) whose inputs a rank changed; ``copies[rank][i]`` belongs to ``calls[i]``. The inputs the
    reference itself updates (every one, for an in-place problem) are judged as outputs instead."""
    if in_place:
        return
    for position, call in enumerate(calls):
        for rank, expected in enumerate(call.expected):
            if expected is None:
                continue
            changed = changed_inputs(call.inputs[rank], copies[rank][position], set(expected.mutated))
            if changed:
                raise input_changed(call, rank, changed, len(call.expected))


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
