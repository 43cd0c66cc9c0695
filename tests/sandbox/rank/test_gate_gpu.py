"""The gate before a timed call on a GPU (marker gpu; sandbox/rank/gate.py): work queued behind it
does not start until the parent opens it, and then unmasks with the key the parent wrote, as the
key in a kernel argument does; a side stream that does not wait for it reads masked inputs."""

import time

import pytest

from sandbox.rank import input_mask
from sandbox.rank.gate import Board, RankGate

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("rank", [0, 3])
def test_work_behind_the_gate_waits_for_the_parent_and_unmasks_with_its_key(rank):
    import torch

    board = Board(4)
    try:
        gate = RankGate(board.fd, rank, 4, torch, torch.device("cuda", 0))
        plain = [torch.randn(1 << 20, device="cuda"), torch.arange(1001, dtype=torch.int8, device="cuda")]
        masked = [t.clone() for t in plain]
        input_mask.apply(torch, masked, key=99, rank=rank)
        torch.cuda.synchronize()
        for key in (99, 99):  # a second call reuses the board: the next sequence number
            sequence = board.next()
            gate.wait(sequence)
            behind = torch.cuda.Event()
            input_mask.apply_keyed(masked, gate.key)
            behind.record()
            time.sleep(0.05)
            assert not behind.query()  # nothing behind the gate ran while it was shut
            opened = time.perf_counter()
            board.release(sequence, [input_mask.device_key(key, r) for r in range(4)])
            behind.synchronize()
            print(f"\ngate opened to work done: {(time.perf_counter() - opened) * 1e3:.3f} ms")
            if sequence == 1:
                assert all(torch.equal(m, p) for m, p in zip(masked, plain))  # unmasked with the parent's key
                input_mask.apply(torch, masked, key=99, rank=rank)  # masked again for the second call
        assert all(torch.equal(m, p) for m, p in zip(masked, plain))
    finally:
        board.close()


def test_a_side_stream_that_does_not_wait_reads_masked_inputs():
    """Work a solution starts on a stream of its own while the gate is shut: the inputs are still masked."""
    import torch

    board = Board(1)
    try:
        gate = RankGate(board.fd, 0, 1, torch, torch.device("cuda", 0))
        plain = torch.randn(1 << 20, device="cuda")
        masked = plain.clone()
        input_mask.apply(torch, [masked], key=7, rank=0)
        torch.cuda.synchronize()
        sequence = board.next()
        gate.wait(sequence)
        input_mask.apply_keyed([masked], gate.key)
        side = torch.cuda.Stream()
        with torch.cuda.stream(side):
            early = masked.clone()
        side.synchronize()  # ran beside the shut gate
        board.release(sequence, [input_mask.device_key(7, 0)])
        torch.cuda.synchronize()
        assert torch.equal(masked, plain)
        assert not torch.equal(early, plain)
    finally:
        board.close()
