"""The rank wire: plain data only, every tensor checked against its blob before it is read."""

import json
import os
import struct

import pytest
import torch

from sandbox.rank import wire
from tests.support.blobs import device_header


def roundtrip(obj):
    tensors = []
    tree = wire.encode_tree(obj, tensors)
    fd = wire.write_blob(tree, tensors)
    try:
        with wire.Blob(fd, 2**30) as blob:
            return wire.decode_tree(blob.tree, blob.tensors())
    finally:
        os.close(fd)


def test_tensors_and_plain_values_cross_intact():
    x = torch.randn(3, 5, dtype=torch.bfloat16)
    ints = torch.arange(7, dtype=torch.int64)
    flags = torch.tensor([True, False, True])
    grad = torch.randn(4, requires_grad=True)
    obj = (x, [ints, {"k": flags, "n": 3}], 2.5, float("inf"), None, "s", torch.Size([2, 3]), torch.float16, grad, torch.empty(0, 4))
    out = roundtrip(obj)
    assert isinstance(out, tuple) and torch.equal(out[0], x) and out[0].dtype == torch.bfloat16
    assert torch.equal(out[1][0], ints) and torch.equal(out[1][1]["k"], flags) and out[1][1]["n"] == 3
    assert out[2:8] == (2.5, float("inf"), None, "s", torch.Size([2, 3]), torch.float16)
    assert out[8].requires_grad and out[8].is_leaf and torch.equal(out[8].detach(), grad.detach())
    assert out[9].shape == (0, 4)


def test_a_module_crosses_as_data():
    torch.manual_seed(0)
    linear = torch.nn.Linear(4, 3)
    out = roundtrip((linear,))[0]
    assert type(out) is torch.nn.Linear and out.in_features == 4 and out.out_features == 3
    x = torch.randn(2, 4)
    assert torch.equal(out(x), linear(x))


def test_a_sparse_coo_tensor_crosses_as_its_indices_and_values():
    dense = torch.zeros(3, 4, 5)
    dense[0, 1, 2], dense[2, 3, 4], dense[1, 0, 0] = 1.5, -2.0, 3.25
    out = roundtrip((dense.to_sparse(), 7))
    assert out[0].layout == torch.sparse_coo and out[0].is_coalesced() and torch.equal(out[0].to_dense(), dense) and out[1] == 7
    with pytest.raises(wire.WireError, match="layout"):
        wire.encode_tree(dense.to_sparse_csr(), [])


@pytest.mark.parametrize("tree", [{"group": "pairs"}, {"group": [0, -1]}, {"group": []}, {"coo": [{"T": 0}, 3, [2]]}])
def test_malformed_groups_and_sparse_tensors_are_refused(tree):
    with pytest.raises(wire.WireError):
        wire.check_tree(tree, 2)


def test_objects_that_are_not_data_are_refused():
    class Sneaky:
        pass

    with pytest.raises(wire.WireError):
        wire.encode_tree((Sneaky(),), [])


def _blob_with(header: dict, data: bytes = b"") -> int:
    raw = json.dumps(header).encode()
    prefix = wire.MAGIC + struct.pack("<Q", len(raw)) + raw
    prefix += bytes(-len(prefix) % wire.ALIGN)
    return wire.sealed_memfd("test", [prefix, data])


@pytest.mark.parametrize("spec, why", [
    ({"dtype": "object", "shape": [1], "offset": 0, "nbytes": 8, "requires_grad": False}, "dtype"),
    ({"dtype": "float32", "shape": [1000], "offset": 0, "nbytes": 4000, "requires_grad": False}, "outside"),
    ({"dtype": "float32", "shape": [2], "offset": 0, "nbytes": 4, "requires_grad": False}, "cannot hold"),
    ({"dtype": "float32", "shape": [-1], "offset": 0, "nbytes": 4, "requires_grad": False}, "shape"),
    ({"dtype": "float32", "shape": [1], "offset": 0, "nbytes": 4, "requires_grad": False, "extra": 1}, "malformed"),
])
def test_a_lying_tensor_description_is_refused_before_reading(spec, why):
    fd = _blob_with({"tree": {"T": 0}, "tensors": [spec]}, bytes(64))
    try:
        with pytest.raises(wire.WireError, match=why):
            wire.Blob(fd, 2**30)
    finally:
        os.close(fd)


@pytest.mark.parametrize("shape", [[0, 2**61, 2**61], [2**61, 0, 4], [0] + [2**10] * 6, [0, 2**60]])
def test_an_empty_tensor_whose_strides_would_overflow_is_refused(shape):
    """Zero bytes, so numel x itemsize = nbytes holds, yet torch cannot even make the empty tensor:
    its strides are the products of the other dimensions (tests/fixtures/hostile/reveal_zero_size_overflowing_shape.py)."""
    fd = _blob_with({"tree": {"T": 0}, "tensors": [{"dtype": "float32", "shape": shape, "offset": 0, "nbytes": 0,
                                                     "requires_grad": False}]}, bytes(64))
    try:
        with pytest.raises(wire.WireError, match="too large"):
            wire.Blob(fd, 2**30)
    finally:
        os.close(fd)


def test_a_large_but_describable_empty_tensor_still_crosses():
    out = roundtrip((torch.empty(0, 2**20, 2**20),))[0]
    assert out.shape == (0, 2**20, 2**20) and out.numel() == 0


@pytest.mark.parametrize("tree", [{"T": 5}, {"pickle": "x"}, {"module": {"class": "os.system", "attrs": {}, "params": {},
                                                                          "buffers": {}, "children": {}}}, {"F": "1e999"}])
def test_a_malformed_tree_is_refused(tree):
    fd = _blob_with({"tree": tree, "tensors": []})
    try:
        with pytest.raises(wire.WireError):
            wire.Blob(fd, 2**30)
    finally:
        os.close(fd)


def test_an_unsealed_or_oversized_file_is_refused():
    fd = os.memfd_create("plain")
    os.write(fd, b"x" * 100)
    try:
        with pytest.raises(wire.WireError, match="sealed"):
            wire.Blob(fd, 2**30)
    finally:
        os.close(fd)
    fd = wire.write_blob({"T": 0}, [torch.zeros(1000)])
    try:
        with pytest.raises(wire.WireError, match="at most"):
            wire.Blob(fd, 100)
    finally:
        os.close(fd)


def test_messages_carry_descriptors_and_large_headers():
    a, b = wire.Channel.pair()
    fd = wire.write_blob({"T": 0}, [torch.ones(3)])
    a.send({"type": "x", "big": "y" * 200_000}, [fd])
    os.close(fd)
    message, fds = b.recv(timeout_s=5)
    assert message["big"] == "y" * 200_000 and len(fds) == 1
    with wire.Blob(fds[0], 2**20) as blob:
        assert torch.equal(blob.tensors()[0], torch.ones(3))
    os.close(fds[0])
    a.close()
    with pytest.raises(wire.ChannelClosed):
        b.recv(timeout_s=5)


@pytest.mark.parametrize("payload", [b"[1,2]", b"not json", b'{"a": NaN}', b"{" * 100_000])
def test_a_malformed_message_is_a_wire_error(payload):
    import socket

    a, b = wire.Channel.pair()
    socket.send_fds(a.sock, [payload], [])
    with pytest.raises(wire.WireError):
        b.recv(timeout_s=5)


def _read(fd: int, **kind) -> list:
    try:
        with wire.Blob(fd, 2**30, **kind) as blob:
            return blob.tensors()
    finally:
        os.close(fd)


def test_a_pooled_blob_is_written_again_into_the_same_memory_once_returned():
    """The reference's expected outputs: a memfd kept and rewritten after the parent has read it,
    one of another size made anew, and only as many bytes kept as the pool allows."""
    pool = wire.BlobPool(max_bytes=2**20)
    first = torch.arange(1000, dtype=torch.float32)
    fd = pool.write(3, [first])
    inode = os.fstat(fd).st_ino
    assert torch.equal(_read(fd, pooled=True)[0], first)
    pool.returned()
    second = torch.arange(1000, 2000, dtype=torch.float32)
    fd = pool.write(3, [second])
    assert os.fstat(fd).st_ino == inode and torch.equal(_read(fd, pooled=True)[0], second)
    other = pool.write(3, [torch.zeros(10)])
    assert os.fstat(other).st_ino != inode
    os.close(other)
    large = pool.write(3, [torch.zeros(2**19)])  # 2 MiB: more than the pool keeps
    large_inode = os.fstat(large).st_ino
    os.close(large)
    pool.returned()
    assert all(os.fstat(fd).st_ino != large_inode for fds in pool.free.values() for fd in fds)
    assert sum(len(fds) for fds in pool.free.values()) == 2
    pool.close()
    assert not pool.free and not pool.lent


def test_a_pooled_blob_is_never_taken_for_a_sealed_one():
    """A pooled blob can be written again: a reader that needs bytes no one can change later (a
    rank staging its inputs) refuses it; and it can never be resized."""
    pool = wire.BlobPool(max_bytes=2**20)
    fd = pool.write(1, [torch.ones(100)])
    with pytest.raises(wire.WireError, match="not sealed against writes"):
        wire.Blob(fd, 2**30)
    with pytest.raises(OSError):
        os.ftruncate(fd, 10)
    os.close(fd)
    pool.close()


def test_a_device_blob_header_describes_device_memory_and_is_never_read_as_host_memory():
    tensors = [torch.arange(1000, dtype=torch.float32), torch.ones(3, dtype=torch.int64)]
    fd = device_header([{"T": 0}, {"T": 1}], tensors)
    try:
        with wire.Blob(fd, 2**20) as blob:
            assert blob.device_bytes == 4096 and [s["nbytes"] for s in blob.specs] == [4000, 24]
            with pytest.raises(wire.WireError, match="without its device memory"):
                blob.tensors()  # on the CPU: a device blob's bytes are not in the file
            with pytest.raises(wire.WireError, match="without its device memory"):
                blob.tensors("cuda")  # no descriptor came with it
        copy = wire.shared_copy(fd, 2**20)  # what the parent stages on the CPU
        try:
            with pytest.raises(wire.WireError, match="shared host memory"):
                wire.Blob(copy, 2**20, shared=True)
        finally:
            os.close(copy)
    finally:
        os.close(fd)


@pytest.mark.parametrize("device_bytes", [100, -1, "4096", 2**40])
def test_a_device_blob_whose_tensors_lie_outside_its_device_memory_is_refused(device_bytes):
    fd = device_header([{"T": 0}], [torch.zeros(1000)], device_bytes)
    try:
        with pytest.raises(wire.WireError):
            wire.Blob(fd, 2**30)
    finally:
        os.close(fd)
