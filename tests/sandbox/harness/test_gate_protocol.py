"""The parent's side of gated calls (sandbox/rank/gate.py, RankGroup.ask_gated), against a stand-in
group of real processes (tests/support/gate_rank.py) at worlds 2, 4 and 8: the gate opens only once
every rank's launch is done, with each rank's own key; a call that waits for its gate inside it is
let through after LAUNCH_WAIT_S and counted; a rank that answers before its launch is done broke the
protocol. The GPU side (the gate kernel, the keyed unmasking) is tested on a GPU:
tests/sandbox/harness/test_harness_gpu.py::test_cuda_mode_times_reference_and_candidate."""

from __future__ import annotations

import hashlib
import os
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sandbox.harness import messages as m
from sandbox.harness.groups import LAUNCH_WAIT_S, Answer, RankFailure, RankGroup
from sandbox.rank import input_mask
from sandbox.rank.gate import Board
from tests.support import gate_rank

ROOT = Path(__file__).resolve().parents[3]


def _group(world: int, behaviour: str) -> RankGroup:
    def launch(argv, pass_fds, log_fd):
        return subprocess.Popen([sys.executable, gate_rank.__file__, *argv], pass_fds=[*pass_fds, log_fd], stdout=log_fd,
                                stderr=log_fd, env={**os.environ, "PYTHONPATH": str(ROOT)})

    group = RankGroup("candidate", world, {"behaviour": behaviour}, launch, None)
    assert all(isinstance(a, Answer) for a in group.take_board(10.0, "gate"))
    return group


def _call(group: RankGroup, key: int) -> tuple[list, float, float]:
    keys = [input_mask.device_key(key, rank) for rank in range(group.world)]
    sent = time.perf_counter()
    answers, opened = group.ask_gated({"type": "call", "round": 1, "index": 0}, keys, m.Done, 10.0, "performance")
    return answers, opened - sent, (time.perf_counter() - opened) * 1000.0


def _checksum(key: int, rank: int) -> str:
    return hashlib.sha256(struct.pack("<8I", *input_mask.device_key(key, rank))).hexdigest()[:32]


@pytest.mark.parametrize("world", [2, 4, 8])
def test_the_gate_opens_once_every_launch_is_done_with_each_ranks_key(world):
    group = _group(world, "launches")
    try:
        for key in (11, 12, 13):
            answers, waited_s, wall_ms = _call(group, key)
            assert all(isinstance(a, Answer) for a in answers), answers
            assert [a.reply.checksum for a in answers] == [_checksum(key, rank) for rank in range(world)]
            assert waited_s >= gate_rank.LAUNCH_S  # the launch is before the gate, off the parent's clock...
            assert waited_s < LAUNCH_WAIT_S  # ...which waited for the launches, not for its limit
            assert wall_ms < 1000 * LAUNCH_WAIT_S
        assert group.opened_early == 0
        group.check_quiet()
    finally:
        group.kill()


@pytest.mark.parametrize("world", [2, 4, 8])
def test_a_call_that_waits_for_its_gate_inside_is_let_through_and_counted(world):
    group = _group(world, "waits_inside")
    try:
        for count in (1, 2):
            answers, waited_s, _ = _call(group, 21 + count)
            assert all(isinstance(a, Answer) for a in answers), answers  # its late ``launched`` is no violation
            assert waited_s >= LAUNCH_WAIT_S
            assert group.opened_early == count
            group.check_quiet()  # nothing left over on the channels
    finally:
        group.kill()


@pytest.mark.parametrize("world", [2, 4, 8])
def test_an_answer_before_the_launch_is_done_breaks_the_protocol(world):
    group = _group(world, "done_early")
    try:
        answers, _, _ = _call(group, 31)
        assert all(isinstance(a, RankFailure) and a.kind == "violation" for a in answers), answers
        assert "where Launched was due" in answers[0].message
    finally:
        group.kill()


def test_the_board_is_sealed_against_shrinking_and_opens_in_order():
    board = Board(8)
    try:
        with pytest.raises(PermissionError):
            os.ftruncate(board.fd, 0)  # a rank that shrank it would fault the parent's next write
        keys = [input_mask.device_key(5, rank) for rank in range(8)]
        board.release(board.next(), keys)
        view = os.pread(board.fd, 8 * 64, 0)
        for rank in range(8):
            assert struct.unpack_from("<Q", view, rank * 64)[0] == 1
            assert list(struct.unpack_from("<8I", view, rank * 64 + 8)) == keys[rank]
    finally:
        board.close()
