"""Inputs masked until their call (sandbox/rank/input_mask.py): the reference masks a call's inputs
on the device, a rank removes the mask only with the key its call message brings
(RankServer._unmasked). The keystream is SHAKE-128 on the CPU, ChaCha20 on a GPU (its kernel
built for the host here; on a GPU: tests/sandbox/rank/test_input_mask_gpu.py)."""

import ctypes
import hashlib
import os
import struct
from types import SimpleNamespace

import pytest
import torch

from sandbox.rank import input_mask, wire
from sandbox.rank.server import RankServer


def _inputs() -> list:
    return [torch.randn(33, 7), torch.randn(5, 3, dtype=torch.bfloat16), torch.tensor([True, False, True]),
            torch.randn(7, dtype=torch.complex64), torch.arange(11, dtype=torch.int8), torch.zeros((), dtype=torch.float16),
            torch.empty(0), torch.randn(4, 6).t(), torch.randn(9, requires_grad=True)]


def _bytes(tensor) -> bytes:
    return tensor.detach().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()


def test_the_mask_hides_every_byte_pattern_and_its_key_alone_removes_it():
    plain = _inputs()
    masked = input_mask.masked(torch, plain, key=12345, rank=0)
    assert [_bytes(p) for p in plain] != [_bytes(m) for m in masked]
    for original, copy in zip(plain, masked):
        assert copy.shape == original.shape and copy.dtype == original.dtype and copy.is_contiguous()
        assert copy.requires_grad == original.requires_grad
        if original.numel() * original.element_size() >= 4:
            assert _bytes(copy) != _bytes(original), f"{original.dtype} {tuple(original.shape)} left unmasked"
    other = [m.detach().clone() for m in masked]
    input_mask.apply(torch, other, key=12346, rank=0)
    assert all(_bytes(o) != _bytes(p) for o, p in zip(other, plain) if p.numel() * p.element_size() >= 4)
    input_mask.apply(torch, masked, key=12345, rank=0)
    assert [_bytes(m) for m in masked] == [_bytes(p) for p in plain]


def test_no_two_calls_or_ranks_share_a_keystream():
    """Each call has its own key, and each rank its own stream of it: what one call's key reveals
    says nothing of another's mask, and two ranks' inputs masked for one call, XORed together, do
    not cancel it (one message starts a call on every rank)."""
    zeros = [torch.zeros(64, dtype=torch.int32)]
    key = input_mask.new_key()
    streams = [_bytes(input_mask.masked(torch, zeros, k, rank)[0]) for k, rank in ((key, 0), (input_mask.new_key(), 0), (key, 1))]
    assert len(set(streams)) == 3


def test_the_cpu_keystream_is_shake_128_of_the_key_the_rank_and_the_place():
    tensors = [torch.zeros(5, dtype=torch.int64), torch.zeros(3, dtype=torch.uint8)]
    input_mask.apply(torch, tensors, key=2**61 + 9, rank=3)
    for stream, tensor in enumerate(tensors):
        size = tensor.numel() * tensor.element_size()
        assert _bytes(tensor) == hashlib.shake_128(f"kloop-mask/{2**61 + 9}/3/{stream}".encode()).digest(size)


def test_keys_that_torch_s_cpu_generator_could_not_tell_apart_mask_differently():
    """HOSTILE: the CPU mask was torch's CPU generator, a Mersenne Twister seeded with a 63-bit hash
    of the key and the rank, of which it keeps 32 bits: among 2**17 keys two share a keystream, and
    2**32 seeds are all a staged input's mask could be (its 624-word state also follows from known
    words of the inputs). Control: the key and the rank alone still remove the mask."""
    def old_seed(key: int) -> int:  # input_mask._seed before 2026-12-07; mt19937 kept its low 32 bits
        return (int.from_bytes(hashlib.blake2b(f"{key}/0".encode(), digest_size=8).digest(), "little") >> 1) & 0xFFFFFFFF

    seen: dict[int, int] = {}
    key = 0
    while old_seed(key) not in seen:
        seen[old_seed(key)] = key
        key += 1
    first, second = seen[old_seed(key)], key
    masks = [_bytes(input_mask.masked(torch, [torch.zeros(256, dtype=torch.int32)], k, 0)[0]) for k in (first, second)]
    assert masks[0] != masks[1], f"keys {first} and {second} mask alike"
    plain = [torch.randn(100)]
    masked = input_mask.masked(torch, plain, second, 0)
    input_mask.apply(torch, masked, second, 0)
    assert torch.equal(masked[0], plain[0])


def test_a_tensor_that_starts_off_an_eight_byte_boundary_is_masked_whole():
    storage = torch.zeros(101, dtype=torch.uint8)
    view = storage[3:]
    input_mask.apply(torch, [view], key=7, rank=1)
    assert _bytes(view) == hashlib.shake_128(b"kloop-mask/7/1/0").digest(98) and storage[:3].eq(0).all()


def _staged(key: int):
    """A masked call as a rank holds it after staging: the tree, the masked leaves, no inputs."""
    dense = torch.randn(4, 5)
    sparse = torch.sparse_coo_tensor(torch.tensor([[0, 2], [1, 3]]), torch.tensor([1.5, -2.0]), (3, 4))
    leaves: list = []
    tree = wire.encode_tree([dense, {"sparse": sparse, "scale": 0.5}], leaves)
    entry = {"tree": tree, "leaves": input_mask.masked(torch, leaves, key, rank=3), "masked": True, "inputs": None}
    return entry, dense, sparse


def test_a_rank_unmasks_a_call_once_with_the_key_its_message_brings():
    rank = SimpleNamespace(torch=torch, rank=3)
    entry, dense, sparse = _staged(key=99)
    with pytest.raises(wire.WireError, match="without its key"):
        RankServer._unmasked(rank, entry, None)
    assert entry["masked"] and entry["inputs"] is None
    inputs = RankServer._unmasked(rank, entry, 99)
    assert torch.equal(inputs[0], dense)
    assert torch.equal(inputs[1]["sparse"].to_dense(), sparse.to_dense()) and inputs[1]["scale"] == 0.5
    assert RankServer._unmasked(rank, entry, 12345) is inputs  # unmasked once: a later key changes nothing
    assert torch.equal(entry["leaves"][0], dense)  # the leaves the commitment covers hold the inputs too


def test_a_wrong_key_or_rank_leaves_garbage_not_the_inputs():
    dense = torch.randn(16, 8)
    leaves: list = []
    tree = wire.encode_tree([dense], leaves)
    for key, rank in ((8, 0), (7, 1)):  # another call's key, or another rank's stream
        entry = {"tree": tree, "leaves": input_mask.masked(torch, leaves, 7, rank=0), "masked": True, "inputs": None}
        inputs = RankServer._unmasked(SimpleNamespace(torch=torch, rank=rank), entry, key)
        assert not torch.equal(inputs[0], dense)


def test_the_warm_up_flushes_as_often_as_asked_then_waits_for_the_device():
    """``prime``: the warm-up before a timed call, answered only once the device is done with it
    (outside the parent's clock: pipeline._prime)."""
    done = []
    device = SimpleNamespace(flush_l2=lambda count: done.append(("flush", count)), synchronize=lambda: done.append(("sync",)))
    reply, fds = RankServer.prime(SimpleNamespace(device=device), {"type": "prime", "flushes": 24}, [])
    assert reply == {"type": "primed"} and fds == [] and done == [("flush", 24), ("sync",)]


def test_the_warm_up_is_as_many_flushes_as_fill_it():
    """The count both groups flush before a call: the warm-up asked over one flush's device time,
    rounded up, at least one and at most MAX_FLUSHES; none off a GPU or with no warm-up."""
    from sandbox.rank.device import MAX_FLUSHES, flushes_for

    assert flushes_for(2.0, 0.25) == 8 and flushes_for(0.5, 0.25) == 2 and flushes_for(0.6, 0.25) == 3
    assert flushes_for(0.1, 0.25) == 1 and flushes_for(1000.0, 0.01) == MAX_FLUSHES
    assert flushes_for(0.5, 0.0) == 0 and flushes_for(0.0, 0.25) == 0


def _chacha20(key: int, rank: int, stream: int, data: bytes) -> bytes:
    """``data`` XORed with ChaCha20 as the cryptography package makes it (RFC 8439: a 4-byte block
    counter from 0, then the 12-byte nonce), keyed as the device mask says."""
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms

    secret = hashlib.blake2b(f"{key}/{rank}".encode(), digest_size=32, person=b"kloop-mask").digest()
    return Cipher(algorithms.ChaCha20(secret, bytes(4) + struct.pack("<III", stream, 0, 0)), mode=None).encryptor().update(data)


def test_the_device_mask_kernel_is_chacha20(rank_kernels_host):
    """rank_kernels.cu's mask built for the host against a ChaCha20 of record: lengths around a
    64-byte block, unaligned buffers, and another stream for every tensor of a call."""
    words = (ctypes.c_uint * 8)(*range(8))
    key_bytes = struct.pack("<8I", *range(8))
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms

    for size in (1, 15, 63, 64, 65, 127, 128, 1000, 64 * 1024 + 7):
        for offset, stream in ((0, 0), (1, 0), (0, 3), (3, 2**31 + 1)):
            data = os.urandom(size)
            buffer = ctypes.create_string_buffer(bytes(offset) + data, offset + size)
            rank_kernels_host.kloop_mask_chacha20_host(ctypes.addressof(buffer) + offset, size, words, stream)
            nonce = bytes(4) + struct.pack("<III", stream, 0, 0)
            assert buffer.raw[offset:] == Cipher(algorithms.ChaCha20(key_bytes, nonce), mode=None).encryptor().update(data), \
                (size, offset, stream)


def test_the_device_mask_keys_each_tensor_of_a_call_from_the_key_and_the_rank(rank_kernels_host, monkeypatch):
    """What input_mask asks of the device for CUDA tensors (run here by the host build of its
    kernel): one launch a tensor, ChaCha20 keyed by a hash of the call's key and the rank, the
    tensor's place in the call its nonce, a thread a 64-byte block. Two tensors of equal bytes in
    one call are masked apart (their XOR is not the inputs')."""
    launches = []

    def host_launch(name, threads, args, device):
        tensor, size, *words, stream = args
        launches.append((name, threads, size, stream))
        rank_kernels_host.kloop_mask_chacha20_host(tensor.data_ptr(), size, (ctypes.c_uint * 8)(*words), stream)

    monkeypatch.setattr(input_mask.device_kernels, "launch", host_launch)
    plain = [torch.randn(100), torch.randn(100), torch.arange(7, dtype=torch.int8), torch.empty(0)]
    masked = [t.clone() for t in plain]
    input_mask._apply_on_device(masked, 4242, 5)
    assert launches == [("kloop_mask_chacha20", 7, 400, 0), ("kloop_mask_chacha20", 7, 400, 1), ("kloop_mask_chacha20", 1, 7, 2)]
    for stream, (original, copy) in enumerate(zip(plain, masked)):
        assert _bytes(copy) == _chacha20(4242, 5, stream, _bytes(original))
    input_mask._apply_on_device(masked, 4242, 5)
    assert all(torch.equal(m, p) for m, p in zip(masked, plain))
    with pytest.raises(ValueError, match="contiguous"):
        input_mask._apply_on_device([torch.randn(4, 6).t()], 1, 0)
