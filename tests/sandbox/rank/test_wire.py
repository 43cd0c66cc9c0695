"""The rank wire: plain data only, every tensor checked against its blob before it is read."""

import hashlib
import json
import os
import struct

import numpy as np
import pytest
import torch

from sandbox.rank import wire


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
    return wire._sealed_memfd("test", [prefix, data])


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


def test_commitments_are_equal_for_equal_bytes_only():
    x = torch.randn(1001, dtype=torch.bfloat16)
    assert wire.commitment([x]) == wire.commitment([x.clone()])
    y = x.clone()
    y[17] = y[17] + 1
    assert wire.commitment([x]) != wire.commitment([y])
    assert wire.commitment([x]) != wire.commitment([x.reshape(7, 143)])
    odd = torch.arange(3, dtype=torch.int8)
    assert wire.commitment([odd]) != wire.commitment([torch.tensor([2, 1, 0], dtype=torch.int8)])


def test_a_commitment_is_not_linear_in_the_bytes():
    """Two tensors with equal sums of 32-bit words (the old checksum) commit differently; so do a
    concatenation and another one whose parts have the same word-sums."""
    a = torch.tensor([1, 2, 3, 4], dtype=torch.int32)
    b = torch.tensor([4, 3, 2, 1], dtype=torch.int32)
    assert int(a.sum()) == int(b.sum()) and wire.commitment([a]) != wire.commitment([b])
    assert wire.commitment([torch.cat([a, b])]) != wire.commitment([torch.cat([b, a])])


def _chunked_sha256(data: bytes) -> str:
    chunk = wire.DIGEST_CHUNK_BYTES
    digests = [hashlib.sha256(data[i:i + chunk]).digest() for i in range(0, len(data), chunk)] or [hashlib.sha256(data).digest()]
    return hashlib.sha256(struct.pack("<Q", len(data)) + b"".join(digests)).hexdigest()


def test_a_digest_hashes_the_whole_mebibytes_block_transposed_then_the_rest():
    """The order, written out with numpy: at an unaligned offset, with a tail, every byte bound."""
    raw = torch.randint(0, 256, (2 * wire.STRIPE_BYTES + 1003,), dtype=torch.uint8)
    tensor = raw[3:]  # storage offset 3: not word-aligned
    data = tensor.numpy()
    body = len(data) - len(data) % wire.STRIPE_BYTES
    ordered = data[:body].reshape(-1, wire.STRIPE_BLOCKS, wire.STRIPE_BLOCK_BYTES).transpose(1, 0, 2).tobytes() + data[body:].tobytes()
    assert wire.tensor_digest(tensor) == _chunked_sha256(ordered)
    for position in (0, 255, 256, wire.STRIPE_BYTES + 7, body + 5):
        changed = tensor.clone()
        changed[position] ^= 1
        assert wire.tensor_digest(changed) != wire.tensor_digest(tensor)


@pytest.mark.parametrize("layout", ["ranges", "stripes"])
@pytest.mark.parametrize("world", [2, 4, 8])
def test_every_chunk_of_the_hash_order_changes_owner_hundreds_of_times(layout, world):
    """Ranks that own contiguous ranges of a 64 MiB output (an all-gather along dim 0) or stripes
    of a power-of-two width (along a later dim): in the order the previous test pins, every
    chunk passes from one rank's bytes to another's at least 757 times, so ranks hashing their
    own parts would pass a hash state as often (in their own order: 0 for ranges)."""
    size, block = 64 * 2**20, wire.STRIPE_BLOCK_BYTES
    blocks = size // block
    body = blocks - blocks % wire.STRIPE_BLOCKS
    order = np.concatenate([np.arange(body).reshape(-1, wire.STRIPE_BLOCKS).T.reshape(-1), np.arange(body, blocks)])
    per_chunk = wire.DIGEST_CHUNK_BYTES // block
    widths = [size // world] if layout == "ranges" else [256, 2048, 8192, 65536]
    for width in widths:
        owner = (order * block) // width % world
        changes = [int((part[1:] != part[:-1]).sum()) for part in np.split(owner, range(per_chunk, blocks, per_chunk))]
        assert min(changes) >= 757, (width, min(changes))


def test_an_all_gather_output_cannot_be_committed_from_the_digests_of_its_shards_chunks():
    """Shards of whole 8 MiB chunks: their chunk digests, put together, were the output's digest
    (tests/fixtures/hostile/chunk_digest_commitment_forgery.py); they are not any more."""
    shards = [torch.randint(0, 256, (wire.DIGEST_CHUNK_BYTES,), dtype=torch.uint8) for _ in range(2)]
    pieces = [hashlib.sha256(s.numpy().tobytes()).digest() for s in shards]
    forged = hashlib.sha256(struct.pack("<Q", 2 * wire.DIGEST_CHUNK_BYTES) + b"".join(pieces)).hexdigest()
    assert forged == _chunked_sha256(torch.cat(shards).numpy().tobytes())  # the old digest: forgeable
    assert wire.tensor_digest(torch.cat(shards)) != forged
