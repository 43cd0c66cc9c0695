"""A rank's sealed copy of what its commitment hashed (sandbox/rank/commitment.py take_sealed): made
only for the call whose nonce asks it, sealed against every write, compared byte for byte by the
parent with what the rank shows, and refused on arrival when it is not sealed
(sandbox/harness/groups.py)."""

from __future__ import annotations

import fcntl
import os

import pytest
import torch

from sandbox.harness import groups
from sandbox.harness.messages import ProtocolViolation
from sandbox.rank import commitment, wire


def _tensors():
    generator = torch.Generator().manual_seed(3)
    return [torch.randn(300, 37, generator=generator), torch.arange(70_000, dtype=torch.int16)]


def _sealed_for(tensors, nonce: bytes) -> int:
    commitment.commitment(tensors, "transposed", nonce, seal=True)
    fd = commitment.take_sealed(nonce)
    assert fd is not None
    return fd


def test_the_copy_holds_the_stream_committed_to_and_is_sealed_against_writes():
    tensors, nonce = _tensors(), os.urandom(16)
    fd = _sealed_for(tensors, nonce)
    try:
        seals = fcntl.fcntl(fd, fcntl.F_GET_SEALS)
        assert seals & wire.SEALS == wire.SEALS
        with pytest.raises(OSError):
            os.write(fd, b"x")
        assert commitment.matches_sealed(fd, tensors)
    finally:
        os.close(fd)


def test_a_copy_is_given_only_for_its_own_nonce_and_only_once():
    tensors = _tensors()
    commitment.commitment(tensors, "transposed", b"a" * 16, seal=True)
    assert commitment.take_sealed(b"b" * 16) is None  # another call's: closed, not handed out
    assert commitment.take_sealed(b"a" * 16) is None  # and gone
    commitment.commitment(tensors, "transposed", b"c" * 16)  # the parent's re-hash: no copy
    assert commitment.take_sealed(b"c" * 16) is None
    commitment.commitment(tensors, "tree", b"d" * 16, seal=True)  # one rank: nothing to share, no copy
    assert commitment.take_sealed(b"d" * 16) is None


def test_bytes_other_than_the_copy_do_not_match_it():
    tensors, nonce = _tensors(), os.urandom(16)
    fd = _sealed_for(tensors, nonce)
    try:
        changed = [tensors[0].clone(), tensors[1].clone()]
        changed[1][12345] += 1
        assert not commitment.matches_sealed(fd, changed)
        assert not commitment.matches_sealed(fd, tensors[:1])  # fewer bytes
        assert not commitment.matches_sealed(fd, [*tensors, torch.zeros(1)])  # more
    finally:
        os.close(fd)


def test_a_writable_file_with_the_right_bytes_does_not_match():
    tensors, nonce = _tensors(), os.urandom(16)
    fd = _sealed_for(tensors, nonce)
    writable = os.memfd_create("copy", os.MFD_ALLOW_SEALING)
    try:
        size = os.fstat(fd).st_size
        os.write(writable, os.pread(fd, size, 0))
        assert not commitment.matches_sealed(writable, tensors)
    finally:
        os.close(fd)
        os.close(writable)


def test_a_reply_s_copy_that_is_not_sealed_is_a_protocol_violation_on_arrival():
    sealed = wire.sealed_memfd("ok", [b"bytes"])
    writable = os.memfd_create("copy", os.MFD_ALLOW_SEALING)
    read_end, write_end = os.pipe()
    try:
        groups._check_sealed(0, [sealed])
        for fd, said in ((writable, "not sealed"), (read_end, "not sealed")):
            with pytest.raises(ProtocolViolation, match=said):
                groups._check_sealed(1, [sealed, fd])
    finally:
        for fd in (sealed, writable, read_end, write_end):
            os.close(fd)


def test_a_copy_written_into_a_memfd_allocated_ahead_is_as_sealed_and_as_whole():
    tensors = _tensors()
    os.close(_sealed_for(tensors, os.urandom(16)))  # sets the size allocated ahead
    commitment.allocate_ahead()
    spare = commitment._spare
    assert spare is not None and spare[1] == os.fstat(spare[0]).st_size
    fd = _sealed_for(tensors, os.urandom(16))
    try:
        assert fd == spare[0] and commitment._spare is None  # written into the spare
        assert fcntl.fcntl(fd, fcntl.F_GET_SEALS) & wire.SEALS == wire.SEALS
        assert commitment.matches_sealed(fd, tensors)
    finally:
        os.close(fd)
    commitment.allocate_ahead()
    smaller = tensors[:1]
    fd = _sealed_for(smaller, os.urandom(16))  # another size: a new memfd, the spare closed
    try:
        assert commitment.matches_sealed(fd, smaller) and not commitment.matches_sealed(fd, tensors)
    finally:
        os.close(fd)
