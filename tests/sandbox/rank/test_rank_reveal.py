"""A rank's reveal (sandbox/rank/server.py): where the driver refuses to share device memory, a
one-rank cuda group's rank shows its calls through memfd blobs instead, which the parent reads
like any other; the check runs the real handler on CPU tensors with the export made to refuse."""

from types import SimpleNamespace

import pytest
import torch

from sandbox.harness.calls import Revealed
from sandbox.rank import device_share, wire
from sandbox.rank.server import RankServer


def _rank(round_calls: int) -> SimpleNamespace:
    """What RankServer.reveal reads of its rank: a one-rank cuda group's, holding a round's outputs."""
    calls = [{"leaves": [torch.arange(6, dtype=torch.float32) + i]} for i in range(round_calls)]
    outputs = {i: [torch.full((3,), float(i))] for i in range(round_calls)}
    return SimpleNamespace(commitment_scheme="tree", device=SimpleNamespace(cuda=True, device=torch.device("cpu")),
                           rounds={7: {"calls": calls, "outputs": outputs}})


def test_a_rank_whose_driver_refuses_to_share_memory_reveals_through_memfds(monkeypatch):
    tried = []

    def refused(tree, tensors, device, copies=1):
        tried.append(len(tensors))
        raise device_share.DeviceShareError("cuMemCreate failed: CUDA_ERROR_NOT_SUPPORTED (801)")

    monkeypatch.setattr(wire, "write_device_blob", refused)
    reply, fds = RankServer.reveal(_rank(3), {"round": 7, "indices": [0, 2]}, [])
    assert reply == {"type": "revealed", "round": 7, "indices": [0, 2]}
    assert tried == [2] and len(fds) == 2  # refused once, then memfds for every call
    shown = [Revealed.read(fds, 2**20) for _ in range(2)]
    assert fds == []
    assert torch.equal(shown[1].outputs[0], torch.full((3,), 2.0)) and torch.equal(shown[1].inputs[0], torch.arange(6.0) + 2)


def test_any_other_failure_to_export_is_the_ranks_own(monkeypatch):
    def broken(tree, tensors, device, copies=1):
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    monkeypatch.setattr(wire, "write_device_blob", broken)
    with pytest.raises(RuntimeError, match="illegal memory access"):
        RankServer.reveal(_rank(1), {"round": 7, "indices": [0]}, [])
