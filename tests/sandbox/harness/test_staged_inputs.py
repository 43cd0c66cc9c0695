"""Inputs staged as the parent's own copies (sandbox/harness/staged_inputs.py, wire.shared_copy):
a rank's writes land where the parent reads them, whatever the rank says; untouched inputs,
inputs the reference itself updates, and in-place problems pass; a copy is masked until its
call; checking a call leaves its copy's atime alone; a private mapping of a copy is found."""

from __future__ import annotations

import mmap
import os
import time

import pytest
import torch

from sandbox.harness.calls import Call, Expected, Inputs
from sandbox.harness.staged_inputs import (PrivateMapping, changed_inputs, check_inputs, check_mappings, mask_copy, private_mappings,
                                           stage_copies)
from sandbox.harness.verdict import Verdict
from sandbox.rank import wire


def _blob(*tensors) -> Inputs:
    fd = wire.write_blob([{"T": i} for i in range(len(tensors))], list(tensors), name="inputs")
    return Inputs(fd, sum(t.numel() * t.element_size() for t in tensors))


def _expected(mutated=()) -> Expected:
    return Expected(expected=[], outputs=1, mutated=list(mutated), shapes=[], dtypes=[], native_max_abs_err=[], native_rms_err=[])


def _call(world: int, label: int = 7, mutated=()) -> Call:
    call = Call(label=label, key=1, rng=2)
    for rank in range(world):
        call.inputs.append(_blob(torch.arange(1000, dtype=torch.float32) + rank, torch.ones(3, 4, dtype=torch.bfloat16)))
        call.expected.append(_expected(mutated))
    return call


def _called(copies, calls: list[Call]) -> None:
    """What every rank's server does to its copies at their calls: remove the mask, in place."""
    for rank, fds in enumerate(copies.fds):
        for fd, call in zip(fds, calls):
            mask_copy(fd, call.mask, rank)


def _rank_tensors(fd: int) -> list:
    """What a rank's server makes of a staged copy."""
    with wire.Blob(fd, 2**30, shared=True) as blob:
        return blob.tensors()


def test_a_rank_writing_its_staged_input_is_seen_by_the_parent():
    call = _call(world=2)
    copies = stage_copies([call], 2)
    _called(copies, [call])
    try:
        check_inputs([call], copies.views, in_place=False)  # untouched: the honest control
        first, second = _rank_tensors(copies.fds[1][0])
        first[10:20] = -1.0  # rank 1 uses its input as scratch
        [(index, differ, total)] = changed_inputs(call.inputs[1].blob, copies.views[1][0], set())
        assert index == 0 and 0 < differ <= 40 and total == 4000  # 10 floats rewritten (some of their bytes stay alike)
        assert changed_inputs(call.inputs[0].blob, copies.views[0][0], set()) == []
        with pytest.raises(Verdict) as caught:
            check_inputs([call], copies.views, in_place=False)
        verdict = caught.value
        assert verdict.status == "wrong"
        assert verdict.message.startswith(f"rank 1 changed its input tensor 0 during call 7 ({differ} of 4000 bytes differ")
        assert verdict.fields["mismatch"].kind == "input_modified" and verdict.fields["mismatch"].rank == 1
        check_inputs([call], copies.views, in_place=True)  # a problem that lets solutions update their inputs
    finally:
        copies.close()
        call.close()


def test_inputs_the_reference_updates_and_unchecked_calls_are_not_judged_here():
    call = _call(world=1, mutated=[1])
    copies = stage_copies([call], 1)
    _called(copies, [call])
    try:
        _, second = _rank_tensors(copies.fds[0][0])
        second.add_(1)  # the reference updates input 1 itself: judged as an output, not here
        check_inputs([call], copies.views, in_place=False)
        call.expected[0] = None  # a timed call the parent does not check
        first, _ = _rank_tensors(copies.fds[0][0])
        first.zero_()
        check_inputs([call], copies.views, in_place=False)
    finally:
        copies.close()
        call.close()


def test_a_staged_copy_is_masked_until_its_call_and_each_rank_unmasks_only_its_own():
    """Nothing can be computed from a round's inputs while they are staged (tests/fixtures/hostile/
    precompute_at_stage.py read 7.71x, correct, at world 2 in a CI run before): every byte pattern
    differs from the inputs until the rank applies its call's key."""
    call = _call(world=2)
    copies = stage_copies([call], 2)
    try:
        for rank in range(2):
            changed = changed_inputs(call.inputs[rank].blob, copies.views[rank][0], set())
            assert [(index, total) for index, _, total in changed] == [(0, 4000), (1, 24)] and changed[0][1] > 3000
        mask_copy(copies.fds[1][0], call.mask, 0)  # rank 0's stream on rank 1's copy: still garbage
        assert len(changed_inputs(call.inputs[1].blob, copies.views[1][0], set())) == 2
        mask_copy(copies.fds[1][0], call.mask, 0)
        _called(copies, [call])
        check_inputs([call], copies.views, in_place=False)
        assert torch.equal(_rank_tensors(copies.fds[1][0])[0], torch.arange(1000, dtype=torch.float32) + 1)
    finally:
        copies.close()
        call.close()


def test_a_staged_copy_cannot_be_resized_nor_pass_for_a_sealed_blob():
    call = _call(world=1)
    copies = stage_copies([call], 1)
    try:
        with pytest.raises(PermissionError):
            os.ftruncate(copies.fds[0][0], 64)  # a rank shrinking it under the parent's mapping (SIGBUS there) cannot
        with pytest.raises(wire.WireError, match="not sealed against writes"):
            wire.Blob(copies.fds[0][0], 2**30)  # where a sealed blob is due, a writable copy is refused
        with pytest.raises(wire.WireError, match="can be resized"):
            plain = os.memfd_create("plain")
            try:
                wire.Blob(plain, 2**30, shared=True)
            finally:
                os.close(plain)
    finally:
        copies.close()
        call.close()


def test_checking_a_call_leaves_its_copys_atime_as_staging_left_it():
    """The parent reads through the mapping it made at staging, after every call alike: the atime a
    rank can fstat() says nothing of which calls were checked (tests/fixtures/hostile/checked_call_atime.py)."""
    checked, unchecked = _call(world=1, label=1), _call(world=1, label=2)
    unchecked.expected[0] = None
    copies = stage_copies([checked, unchecked], 1)
    _called(copies, [checked, unchecked])
    try:
        before = [os.fstat(fd).st_atime_ns for fd in copies.fds[0]]
        time.sleep(0.05)  # past the coarse clock's tick, which stamps atime
        check_inputs([checked, unchecked], copies.views, in_place=False)
        assert [os.fstat(fd).st_atime_ns for fd in copies.fds[0]] == before
    finally:
        copies.close()
        checked.close()
        unchecked.close()


def test_a_private_mapping_of_a_staged_copy_is_found_and_a_shared_one_is_not():
    call = _call(world=1)
    copies = stage_copies([call], 1)
    fd = copies.fds[0][0]
    size = os.fstat(fd).st_size
    try:
        with mmap.mmap(fd, size, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ | mmap.PROT_WRITE):
            assert private_mappings(os.getpid(), copies.files) == []  # the parent's own views are read-only shared too
            check_mappings(os.getpid(), copies.files)
        with mmap.mmap(fd, size, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ | mmap.PROT_WRITE):
            [line] = private_mappings(os.getpid(), copies.files)
            assert line.startswith(f"{os.getpid()}: ") and "kloop-staged" in line
            with pytest.raises(PrivateMapping, match="privately"):
                check_mappings(os.getpid(), copies.files)
    finally:
        copies.close()
        call.close()
