"""What a rank commits to when a call ends: a digest of its outputs and of its inputs' final state.

The parent later asks to see some calls and re-hashes the bytes a rank shows with the same scheme
(sandbox/harness/judge.py): a rank whose bytes differ from its commitment is ``rejected``. The
commitment is a claim, made in the candidate's process; what makes it worth anything is that it
binds the bytes (SHA-256) and that it must be sent when the call ends, in time the parent's clock
counts. Two schemes, one per group (:func:`scheme`):

- ``transposed`` (any group of several ranks, the CPU and emulation): SHA-256 over the SHA-256s of 8 MiB
  chunks of the bytes read in a transposed order, hashed on the host. Several ranks must not be
  able to make it from their own parts and a few digests of the others' (see
  :func:`stream_digest`), which a parallel hash on the device would allow.
- ``tree`` (a group of one rank in cuda mode, where no other rank holds any part): a Merkle tree of
  SHA-256 over 1 KiB leaves, hashed on the device where the bytes are (:file:`rank_kernels.cu`),
  so a call's commitment costs a fraction of a millisecond instead of a copy of every byte to the
  host and a host SHA-256 of them (about 20-25 ms a call at 64 MB on the H200), and the parent's
  clock resolves work hidden after the timer that much finer.

Imported by rank processes: the standard library, torch and kloop_runtime only (lazily).
"""

from __future__ import annotations

import ctypes
import fcntl
import functools
import hashlib
import json
import mmap
import os
import struct
import threading
from typing import Any

from sandbox.rank import device_kernels, wire

DIGEST_CHUNK_BYTES = 8 * 2**20
# the transposed order (stream_digest): the bytes read as a matrix of blocks, column by column. A large stream's blocks are
# 256 bytes, 4093 to a row (a prime, so no power-of-two layout lines up with a column); a smaller one's 64 bytes, in as
# many columns (a prime) as leave it at least MIN_ROWS rows, so every column still crosses every rank's part
STRIPE_BLOCK_BYTES = 256
SMALL_BLOCK_BYTES = 64
STRIPE_BLOCKS = 4093
MIN_ROWS = 16
# a tree digest's leaf; a multiple of SHA-256's 64-byte block. One thread hashes a leaf: smaller leaves, more threads. A
# 64 MiB tensor on an H100 on 2026-12-06 (benchmarks/commitment_cost.py, device.sh leaves): 0.29 ms at 1 KiB, 0.32 at 2,
# 0.34 at 4, 0.56 at 8 (0.28 at 512 bytes, with twice the leaves and a level more)
TREE_LEAF_BYTES = 1024
TREE_PREFIX = b"kloop-tree-sha256"
SCHEMES = ("transposed", "tree")
_digest_pool = None
_staging: dict[str, Any] = {}
_staging_lock = threading.Lock()
_sealed: tuple[bytes, int] | None = None  # (nonce, fd) of the last stream committed to with seal, until taken
_spare: tuple[int, int] | None = None  # (fd, size) of a memfd allocated ahead for the next sealed copy
_last_sealed_size = 0


def scheme(world: int, mode: str) -> str:
    """The commitment scheme of a group of ``world`` ranks in ``mode`` (cpu, cuda or emulate): the
    rank server and the parent both ask here. Emulation is never timed, and its reference ranks
    run on the CPU, where the tree is slower to hash than the transposed order."""
    return "tree" if world == 1 and mode == "cuda" else "transposed"


def commitment(tensors: list, scheme: str = "transposed", nonce: bytes = b"", seal: bool = False) -> str:
    """A short digest of ``tensors`` (dtypes, shapes and the digest of their bytes), in order, bound
    to the call's ``nonce``: a secret the parent sends with the call and not before. In the
    transposed scheme the bytes of all the tensors are one stream (:func:`stream_digest`) and every
    chunk's SHA-256 starts from the nonce, so no part of a commitment can be made ahead of its call:
    the inputs' part, a call's staged bytes known a round ahead, was the larger half of the
    harness's work in a call (10 ms at 64 MB on the H200 host), and a rank that hashed it while
    earlier calls ran on the device had that much time to hide work after its timer, inside the
    reference's unclaimed time (tests/fixtures/hostile/precomputed_input_digests.py). In the tree
    scheme (one rank, hashed on the device in a fraction of a millisecond) the nonce binds the root
    only.

    With ``seal`` (a rank's own commitment, transposed scheme), the stream hashed is also left in a
    sealed memfd for :func:`take_sealed`: a copy of the bytes the rank held when the call ended,
    which nothing can change once sealed. The parent compares it with what the rank later shows
    (:func:`matches_sealed`): the bytes shown existed when the call ended. A digest alone did not
    hold them to that: in an all-gather the root, holding every rank's outputs and inputs, made
    every rank's commitment, and the others received their outputs only when asked to show them,
    untimed (tests/fixtures/hostile/gather_to_root_commits_for_all.py). It binds them to the rank
    only where no descriptor can pass between ranks: on a CPU each rank is walled off from the
    others (sandbox/rank/zygote.py); on a GPU, ranks pass each other descriptors (CUDA IPC needs
    it), and a root that seals each peer's copy in the timed call and hands it over passes
    (tests/fixtures/hostile/root_seals_copies_for_peers.py: a known hole there)."""
    parts = [[str(t.dtype).removeprefix("torch."), list(t.shape)] for t in tensors]
    if scheme == "tree":
        parts = [[*part, tree_digest(t)] for part, t in zip(parts, tensors)]
    else:
        parts.append(stream_digest(tensors, nonce, seal))
    return hashlib.sha256(nonce + json.dumps(parts).encode()).hexdigest()[:32]


# ---------------------------------------------------------------------------- transposed
def stream_digest(tensors: list, nonce: bytes = b"", seal: bool = False) -> str:
    """SHA-256 over the SHA-256s of 8 MiB chunks (each started from ``nonce``, hashed in parallel)
    of the tensors' bytes, one after the other as one stream, read in a transposed order: the
    stream's whole rows of blocks (:func:`stream_geometry`) as a matrix, column by column, then the
    rest as it is. A commitment must bind the bytes, and only a process that holds all of them may
    be able to make it.

    A sum of words did not bind them. It is linear: the word-sum of a concatenation is the sum of
    its parts' word-sums, so an all-gather was committed by exchanging one number per rank and
    computed only when asked to show it (tests/fixtures/hostile/wordsum_commitment_forgery.py);
    and within a tolerance any sum can be hit by nudging low bits. Chunks of the bytes in their
    own order did not need all of them: an all-gather's output is the shards one after the other,
    so with shards of whole 8 MiB chunks each rank hashed its own and the ranks exchanged 32
    bytes a chunk (chunk_digest_commitment_forgery.py). In the transposed order every column runs
    through every row, so each rank's part of a chunk is cut into pieces interleaved with the other
    ranks': whether the ranks own contiguous ranges or stripes of any power-of-two width, a 64 MiB
    tensor's every chunk changes owner 757 times or more (tests/sandbox/rank/test_commitment.py),
    and ranks that hashed their parts without holding the whole would pass a hash state between
    them as often, in time the parent's clock counts. A stream too small for one row of 1 MiB was
    read in its own order, and so was one of 1 to 2 MiB (a single row): ranks passed a SHA-256
    state along and each hashed its shard of an all-gather of up to 2 MiB
    (tests/fixtures/hostile/sha256_midstate_all_gather.py); now every stream of 2 KiB or more has at
    least MIN_ROWS rows. And each tensor had a digest of its own: the root of a broadcast, which
    holds every rank's output, hashed it for each of them, and no byte moved in a timed call
    (tests/fixtures/hostile/root_commits_for_every_rank.py); in one stream with the rank's own inputs,
    another rank's commitment takes those inputs too."""
    with _staging_lock:
        data = _committed_bytes(tensors)
        chunks = [data[i:i + DIGEST_CHUNK_BYTES] for i in range(0, len(data), DIGEST_CHUNK_BYTES)] or [data]
        digests = list(_pool().map(lambda chunk: _seeded_sha256(nonce, chunk), chunks)) if len(chunks) > 1 else \
            [_seeded_sha256(nonce, chunks[0])]
        if seal:
            _keep_sealed(nonce, _sealed_copy(data))
    return hashlib.sha256(struct.pack("<Q", len(data)) + b"".join(digests)).hexdigest()


def _sealed_copy(data: memoryview) -> int:
    """``data`` in a sealed memfd: the one :func:`allocate_ahead` made where it has the size, else a new one."""
    global _spare, _last_sealed_size
    spare, _spare = _spare, None
    _last_sealed_size = len(data)
    if spare is None or spare[1] != len(data):
        if spare is not None:
            os.close(spare[0])
        return wire.sealed_memfd("committed", [data])
    fd, offset = spare[0], 0
    try:
        while offset < len(data):
            offset += os.pwrite(fd, data[offset:], offset)
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, wire.SEALS)
    except BaseException:
        os.close(fd)
        raise
    return fd


def allocate_ahead() -> None:
    """A memfd of the last sealed copy's size with its pages allocated now, between calls, for the
    next call's copy to be written into, not in the time the parent's clock counts: on the H200's
    host a 64 MiB commitment took 13.9 ms, 40.9 with its copy in a new memfd, 31.6 with the copy
    in one allocated ahead (benchmarks/commitment_cost.py)."""
    global _spare
    if _spare is not None or not _last_sealed_size:
        return
    fd = os.memfd_create("kloop-committed", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    try:
        os.posix_fallocate(fd, 0, _last_sealed_size)
    except OSError:
        os.close(fd)
        return
    _spare = (fd, _last_sealed_size)


def _keep_sealed(nonce: bytes, fd: int) -> None:
    global _sealed
    stale, _sealed = _sealed, (nonce, fd)
    if stale is not None:
        os.close(stale[1])


def take_sealed(nonce: bytes) -> int | None:
    """The sealed copy of the stream last committed to with ``seal``, if it was committed under
    ``nonce`` (the caller closes it); else None."""
    global _sealed
    kept, _sealed = _sealed, None
    if kept is None:
        return None
    if kept[0] != nonce:
        os.close(kept[1])
        return None
    return kept[1]


def matches_sealed(fd: int, tensors: list) -> bool:
    """Whether the sealed memfd ``fd`` (checked sealed) holds exactly the stream ``tensors`` are
    committed as (the transposed scheme's bytes, the parent's side of :func:`take_sealed`)."""
    import torch

    with _staging_lock:
        data = _committed_bytes(tensors)
        try:
            size = wire.check_sealed(fd, len(data))
        except wire.WireError:
            return False
        if size != len(data):
            return False
        if not size:
            return True
        with mmap.mmap(fd, size, access=mmap.ACCESS_COPY) as held:  # private: no write reaches the file, none is made
            return torch.equal(torch.frombuffer(held, dtype=torch.uint8), torch.frombuffer(data, dtype=torch.uint8))


@functools.lru_cache(maxsize=256)  # every call asks again for the same few sizes
def stream_geometry(size: int) -> tuple[int, int]:
    """(block bytes, blocks a row) of the transposed order of a ``size``-byte stream; (size, 1): its own order."""
    block = STRIPE_BLOCK_BYTES if size >= STRIPE_BLOCK_BYTES * STRIPE_BLOCKS * MIN_ROWS else SMALL_BLOCK_BYTES
    columns = min(STRIPE_BLOCKS, size // (block * MIN_ROWS))
    while columns > 2 and any(columns % d == 0 for d in range(2, int(columns ** 0.5) + 1)):
        columns -= 1
    return (block, columns) if columns >= 2 else (size, 1)


def _seeded_sha256(nonce: bytes, chunk) -> bytes:
    digest = hashlib.sha256(nonce)
    digest.update(chunk)
    return digest.digest()


def _committed_bytes(tensors: list) -> memoryview:
    """The tensors' bytes on the host, one stream in the order stream_digest hashes it, in a buffer
    reused from call to call (pinned for device tensors: the block transposition is made on the
    device, and the copy to the host is synchronous)."""
    import torch

    flats = [_flat_bytes(t) for t in tensors]
    if len({f.device for f in flats}) > 1:
        flats = [f.cpu() for f in flats]
    flat = flats[0] if len(flats) == 1 else torch.cat(flats) if flats else torch.empty(0, dtype=torch.uint8)
    size, on_device = flat.numel(), flat.device.type != "cpu"
    key = "pinned" if on_device else "host"
    buffer = _staging.get(key)
    if buffer is None or buffer.numel() < size:
        buffer = _staging[key] = torch.empty(max(size, 2**20), dtype=torch.uint8, pin_memory=on_device)
    host = buffer[:size]
    block, columns = stream_geometry(size)
    row = block * columns
    body = size - size % row if columns > 1 else 0
    if body:
        source = flat[:body] if flat.storage_offset() % 8 == 0 else flat[:body].clone()  # 8-byte words need alignment
        blocks = source.view(torch.int64).view(-1, columns, block // 8).transpose(0, 1)
        host[:body].view(torch.int64).view(columns, -1, block // 8).copy_(blocks.contiguous() if on_device else blocks)
    host[body:].copy_(flat[body:])
    return _tensor_bytes(host)


# ---------------------------------------------------------------------------- tree
def tree_digest(tensor) -> str:
    """SHA-256 of a prefix, the byte length and the top level of a tree of SHA-256: the bytes are
    cut into 1 KiB leaves, a level is the concatenated digests of the leaves of the one below, up
    to the first level of at most one leaf. Hashed on the device for a CUDA tensor, on the host
    (here, and the parent's re-hash) otherwise; both give the same digest."""
    flat = _flat_bytes(tensor)
    size = flat.numel()
    if flat.device.type == "cuda":
        level = _device_top_level(flat)
    else:
        level = _tensor_bytes(flat)
        while len(level) > TREE_LEAF_BYTES:
            level = _host_leaf_digests(level)
    return hashlib.sha256(TREE_PREFIX + struct.pack("<QI", size, TREE_LEAF_BYTES) + bytes(level)).hexdigest()


def _host_leaf_digests(data: memoryview) -> bytes:
    """The concatenated SHA-256s of ``data``'s leaves, hashed in parallel in 8 MiB spans."""
    span = DIGEST_CHUNK_BYTES

    def leaves(start: int) -> bytes:
        end = min(start + span, len(data))
        return b"".join(hashlib.sha256(data[i:min(i + TREE_LEAF_BYTES, end)]).digest()
                        for i in range(start, end, TREE_LEAF_BYTES))

    starts = range(0, len(data), span)
    return b"".join(_pool().map(leaves, starts)) if len(starts) > 1 else leaves(0)


def _device_top_level(flat) -> bytes:
    """The tree's top level, reduced level by level on the device: one kernel launch a level, and
    only the last (at most a leaf) copied to the host."""
    import torch

    level = flat if flat.data_ptr() % 16 == 0 else flat.clone()  # the kernel reads 16-byte words
    while level.numel() > TREE_LEAF_BYTES:
        leaves = -(-level.numel() // TREE_LEAF_BYTES)
        tail = level.numel() - (leaves - 1) * TREE_LEAF_BYTES
        digests = torch.empty(leaves * 32, dtype=torch.uint8, device=level.device)
        device_kernels.launch("kloop_leaf_sha256", leaves, [level, leaves, TREE_LEAF_BYTES, tail, digests], level.device)
        level = digests
    return level.cpu().numpy().tobytes()


# ---------------------------------------------------------------------------- shared
def _flat_bytes(tensor):
    """A tensor's bytes as a contiguous 1-D uint8 tensor on its device."""
    import torch

    return tensor.detach().contiguous().reshape(-1).view(torch.uint8)


def _pool():
    global _digest_pool
    if _digest_pool is None:
        from concurrent.futures import ThreadPoolExecutor

        _digest_pool = ThreadPoolExecutor(max_workers=max(1, min(8, (os.cpu_count() or 1))), thread_name_prefix="kloop-digest")
    return _digest_pool


def _tensor_bytes(flat) -> memoryview:
    """A view of a contiguous CPU tensor's bytes, without a copy (the caller keeps it alive)."""
    nbytes = flat.numel() * flat.element_size()
    if nbytes == 0:
        return memoryview(b"")
    return memoryview((ctypes.c_char * nbytes).from_address(flat.data_ptr())).cast("B")
