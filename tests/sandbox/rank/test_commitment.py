"""Commitments: they bind the bytes, several ranks cannot make one from their own parts, and the
device tree digest (a GPU group of one rank) is the host's, byte for byte."""

import ctypes
import hashlib
import json
import os
import struct

import numpy as np
import pytest
import torch

from sandbox.rank import commitment


def test_commitments_are_equal_for_equal_bytes_only():
    x = torch.randn(1001, dtype=torch.bfloat16)
    assert commitment.commitment([x]) == commitment.commitment([x.clone()])
    y = x.clone()
    y[17] = y[17] + 1
    assert commitment.commitment([x]) != commitment.commitment([y])
    assert commitment.commitment([x]) != commitment.commitment([x.reshape(7, 143)])
    odd = torch.arange(3, dtype=torch.int8)
    assert commitment.commitment([odd]) != commitment.commitment([torch.tensor([2, 1, 0], dtype=torch.int8)])


def test_a_commitment_is_not_linear_in_the_bytes():
    """Two tensors with equal sums of 32-bit words (the old checksum) commit differently; so do a
    concatenation and another one whose parts have the same word-sums."""
    a = torch.tensor([1, 2, 3, 4], dtype=torch.int32)
    b = torch.tensor([4, 3, 2, 1], dtype=torch.int32)
    assert int(a.sum()) == int(b.sum()) and commitment.commitment([a]) != commitment.commitment([b])
    assert commitment.commitment([torch.cat([a, b])]) != commitment.commitment([torch.cat([b, a])])


def _chunked_sha256(data: bytes) -> str:
    chunk = commitment.DIGEST_CHUNK_BYTES
    digests = [hashlib.sha256(data[i:i + chunk]).digest() for i in range(0, len(data), chunk)] or [hashlib.sha256(data).digest()]
    return hashlib.sha256(struct.pack("<Q", len(data)) + b"".join(digests)).hexdigest()


def _transposed(data: np.ndarray) -> bytes:
    """The stream's order written out with numpy: whole rows of blocks column by column, then the rest."""
    block, columns = commitment.stream_geometry(len(data))
    row = block * columns
    body = len(data) - len(data) % row if columns > 1 else 0
    if not body:
        return data.tobytes()
    return data[:body].reshape(-1, columns, block).transpose(1, 0, 2).tobytes() + data[body:].tobytes()


@pytest.mark.parametrize("size", [0, 100, 2047, 2048, 24_576 + 7, 2 * 2**20 - 1, 2 * 2**20 + 1003, 17 * 2**20 + 5])
def test_a_digest_hashes_the_stream_s_rows_of_blocks_transposed_then_the_rest(size):
    """At an unaligned offset, with a tail, every byte bound; the tensors of a call are one stream."""
    raw = torch.randint(0, 256, (size + 3,), dtype=torch.uint8)
    tensor = raw[3:]  # storage offset 3: not word-aligned
    assert commitment.stream_digest([tensor]) == _chunked_sha256(_transposed(tensor.numpy()))
    cut = size // 3
    assert commitment.stream_digest([tensor[:cut], tensor[cut:]]) == commitment.stream_digest([tensor])
    for position in {0, size // 2, size - 1} if size else ():
        changed = tensor.clone()
        changed[position] ^= 1
        assert commitment.stream_digest([changed]) != commitment.stream_digest([tensor])


@pytest.mark.parametrize("size", [2048, 24_576, 2**20, 2 * 2**20 - 1, 5 * 2**20, 64 * 2**20])
def test_every_stream_of_2_kib_or_more_has_at_least_min_rows_rows_of_a_prime_length(size):
    """A stream in its own order lets ranks hash their shards one after another, passing a SHA-256
    state along once a rank (tests/fixtures/hostile/sha256_midstate_all_gather.py)."""
    block, columns = commitment.stream_geometry(size)
    assert columns >= 2 and all(columns % d for d in range(2, columns)), (block, columns)
    assert size // (block * columns) >= commitment.MIN_ROWS
    assert commitment.stream_geometry(2047) == (2047, 1)


@pytest.mark.parametrize("layout", ["ranges", "stripes"])
@pytest.mark.parametrize("world", [2, 4, 8])
def test_every_chunk_of_the_hash_order_changes_owner_hundreds_of_times(layout, world):
    """Ranks that own contiguous ranges of a 64 MiB output (an all-gather along dim 0) or stripes
    of a power-of-two width (along a later dim): in the order the previous test pins, every
    chunk passes from one rank's bytes to another's at least 757 times, so ranks hashing their
    own parts would pass a hash state as often (in their own order: 0 for ranges)."""
    size, block = 64 * 2**20, commitment.STRIPE_BLOCK_BYTES
    blocks = size // block
    body = blocks - blocks % commitment.STRIPE_BLOCKS
    order = np.concatenate([np.arange(body).reshape(-1, commitment.STRIPE_BLOCKS).T.reshape(-1), np.arange(body, blocks)])
    per_chunk = commitment.DIGEST_CHUNK_BYTES // block
    widths = [size // world] if layout == "ranges" else [256, 2048, 8192, 65536]
    for width in widths:
        owner = (order * block) // width % world
        changes = [int((part[1:] != part[:-1]).sum()) for part in np.split(owner, range(per_chunk, blocks, per_chunk))]
        assert min(changes) >= 757, (width, min(changes))


def test_an_all_gather_output_cannot_be_committed_from_the_digests_of_its_shards_chunks():
    """Shards of whole 8 MiB chunks: their chunk digests, put together, were the output's digest
    (tests/fixtures/hostile/chunk_digest_commitment_forgery.py); they are not any more."""
    shards = [torch.randint(0, 256, (commitment.DIGEST_CHUNK_BYTES,), dtype=torch.uint8) for _ in range(2)]
    pieces = [hashlib.sha256(s.numpy().tobytes()).digest() for s in shards]
    forged = hashlib.sha256(struct.pack("<Q", 2 * commitment.DIGEST_CHUNK_BYTES) + b"".join(pieces)).hexdigest()
    assert forged == _chunked_sha256(torch.cat(shards).numpy().tobytes())  # the old digest: forgeable
    assert commitment.stream_digest([torch.cat(shards)]) != forged


@pytest.mark.parametrize("world", [2, 4, 8])
@pytest.mark.parametrize("shard", [1536, 12_288, 2**20])
def test_a_small_all_gather_s_stream_changes_owner_at_every_column(world, shard):
    """An all-gather's output (the shards in rank order) and the rank's own input after it, the
    stream one rank commits to: ranks holding only their shards would pass a hash state along at
    least once a column, a hundred times or more (what a SHA-256 state passed once a rank forged:
    tests/fixtures/hostile/sha256_midstate_all_gather.py)."""
    size = shard * (world + 1)
    block, columns = commitment.stream_geometry(size)
    rows = size // (block * columns)
    order = np.arange(rows * columns).reshape(rows, columns).T.reshape(-1)
    owner = np.minimum(order * block // shard, world - 1)  # the input's blocks are this rank's (world - 1 here)
    assert int((owner[1:] != owner[:-1]).sum()) >= min(100, columns)


def test_a_rank_s_commitment_takes_its_own_inputs():
    """The root of a broadcast holds every rank's output; with each tensor hashed apart it made every
    rank's commitment from those and a digest of the rank's input
    (tests/fixtures/hostile/root_commits_for_every_rank.py). The stream mixes them: no per-tensor part."""
    output, own_input = torch.randn(4096), torch.randn(4096)
    nonce = os.urandom(16)
    whole = commitment.commitment([output, own_input], nonce=nonce)
    digests = [commitment.stream_digest([t], nonce) for t in (output, own_input)]
    parts = [["float32", [4096]], ["float32", [4096]]]
    for forged in ([*parts, digests], [[*parts[0], digests[0]], [*parts[1], digests[1]]]):
        assert hashlib.sha256(nonce + json.dumps(forged).encode()).hexdigest()[:32] != whole


@pytest.mark.parametrize("scheme", commitment.SCHEMES)
def test_either_scheme_binds_every_byte_dtype_and_shape(scheme):
    x = torch.randn(5001, dtype=torch.bfloat16)
    assert commitment.commitment([x], scheme) == commitment.commitment([x.clone()], scheme)
    for position in (0, 4095, 4096, 5000):
        y = x.clone()
        y[position] = y[position] + 1
        assert commitment.commitment([y], scheme) != commitment.commitment([x], scheme)
    assert commitment.commitment([x.view(torch.int16)], scheme) != commitment.commitment([x], scheme)
    assert commitment.commitment([x[:5000].reshape(50, 100)], scheme) != commitment.commitment([x[:5000]], scheme)


def test_the_schemes_differ_and_each_group_gets_one():
    x = torch.arange(100, dtype=torch.float32)
    assert commitment.commitment([x], "tree") != commitment.commitment([x], "transposed")
    assert commitment.scheme(1, "cuda") == "tree"
    assert {commitment.scheme(w, m) for w in (2, 4, 8) for m in ("cpu", "cuda", "emulate")} == {"transposed"}
    assert commitment.scheme(1, "cpu") == commitment.scheme(1, "emulate") == "transposed"


def _tree(data: bytes) -> str:
    """The tree digest written out plainly."""
    level, leaf = data, commitment.TREE_LEAF_BYTES
    while len(level) > leaf:
        level = b"".join(hashlib.sha256(level[i:i + leaf]).digest() for i in range(0, len(level), leaf))
    return hashlib.sha256(commitment.TREE_PREFIX + struct.pack("<QI", len(data), leaf) + level).hexdigest()


@pytest.mark.parametrize("size", [0, 1, 8191, 8192, 8193, 3 * 8192 * 256 + 5, 9 * 2**20 + 3])
def test_the_tree_digest_on_the_host_is_the_tree_written_out(size):
    raw = torch.randint(0, 256, (size + 1,), dtype=torch.uint8)
    tensor = raw[1:]  # storage offset 1: not word-aligned
    assert commitment.tree_digest(tensor) == _tree(tensor.numpy().tobytes())


def test_the_device_leaf_kernel_is_sha256_of_every_leaf(rank_kernels_host):
    """rank_kernels.cu built for the host (the same hashing functions the GPU runs) against
    hashlib: lengths around SHA-256's padding boundaries, whole leaves and a short last one."""
    kernel = rank_kernels_host.kloop_leaf_sha256_host
    leaf = commitment.TREE_LEAF_BYTES
    for size in (1, 55, 56, 63, 64, 65, 119, 120, 128, leaf - 1, leaf, leaf + 1, 5 * leaf + 56):
        data = os.urandom(size)
        leaves = -(-size // leaf)
        out = ctypes.create_string_buffer(32 * leaves)
        kernel(ctypes.create_string_buffer(data, size), leaves, leaf, size - (leaves - 1) * leaf, out)
        assert out.raw == b"".join(hashlib.sha256(data[i:i + leaf]).digest() for i in range(0, size, leaf)), size
