"""A call's inputs masked until the call begins.

On a GPU the reference writes a call's inputs into device memory XORed with a keystream drawn from
the call's mask key, a secret of the parent's that reaches a rank only in the message that starts
that call; on the CPU the parent masks the shared copy it stages (sandbox/harness/staged_inputs.py).
The rank's harness code removes the mask there, in place, just before the flush that precedes the
timer. Until then the staged bytes say nothing a solution could compute from, so no work can be
done ahead of the call: while a round is staged, during the warm-up flush before a call (which a
candidate's process could skip and use), or under any other harness work the parent's clock does
not see alone (tests/fixtures/hostile/precompute_at_stage.py, tree_salt_precomputed.py).

The keystream is drawn from the key and the rank: the same bytes in the reference's process and in
the rank's, for the same device kind, and another stream on every rank (one message starts a call
on every rank: with one stream for all, two ranks' masked inputs XORed together would cancel it),
and on one rank another for every tensor of the call. Applying the mask twice removes it.

- On a GPU, ChaCha20 (RFC 8439) keyed with a 256-bit hash of the key and the rank, the tensor's
  place in the call as its nonce: one launch of rank_kernels.cu's kernel a tensor, in place. A
  stream cipher, so the known shape of the inputs (a normal distribution's sign and exponent bits)
  gives nothing towards the rest of the keystream. It replaced torch's generator there (a py-spy
  profile had its operations on a new generator costing a call more host time than the commitment).
  On an H100 on 2026-12-07 (tests/sandbox/rank/test_input_mask_gpu.py, medians of 50) the two cost
  the host alike, 0.101 against 0.093 ms for two tensors of 24 KiB and 0.109 against 0.122 ms for two
  of 64 MiB, where the kernel's work ended in half the time (0.21 against 0.42 ms).
- On the CPU (the parent's shared copies), SHAKE-128 (hashlib) of the key, the rank and the tensor's
  place, as long as the tensor. It replaced torch's CPU generator, a Mersenne Twister that keeps 32
  bits of its seed (the same keystream for seeds 2**40 apart) and whose whole state 624 known words
  give away: the known bytes of a call's inputs (an int64 tensor's zero upper halves) would have
  unmasked the rest while they were staged (a red-team finding of 2026-12-07).
"""

from __future__ import annotations

import hashlib
import secrets
import struct

from sandbox.rank import device_kernels

KEY_BITS = 62


def new_key() -> int:
    return secrets.randbits(KEY_BITS)


def apply(torch, tensors: list, key: int, rank: int) -> None:
    """XOR the bytes of ``tensors`` (contiguous, all on one device), in order, with rank
    ``rank``'s keystream of ``key``, in place."""
    if not tensors:
        return
    if tensors[0].device.type == "cuda":
        _apply_on_device(tensors, key, rank)
        return
    with torch.no_grad():
        for stream, tensor in enumerate(tensors):
            if not tensor.is_contiguous():
                raise ValueError("a masked tensor must be contiguous")
            raw = tensor.detach().reshape(-1).view(torch.uint8)
            if raw.numel():
                keystream = hashlib.shake_128(f"kloop-mask/{int(key)}/{int(rank)}/{stream}".encode()).digest(raw.numel())
                _xor(torch, raw, torch.frombuffer(bytearray(keystream), dtype=torch.uint8))


def _xor(torch, raw, keystream) -> None:
    """``raw ^= keystream`` (two flat uint8 tensors of one length), eight bytes at a time where they fit."""
    words = raw.numel() // 8 if raw.storage_offset() % 8 == 0 else 0  # a dtype view needs an aligned start
    if words:
        raw[:8 * words].view(torch.int64).bitwise_xor_(keystream[:8 * words].view(torch.int64))
    raw[8 * words:].bitwise_xor_(keystream[8 * words:])


def _apply_on_device(tensors: list, key: int, rank: int) -> None:
    words = list(struct.unpack("<8I", hashlib.blake2b(f"{int(key)}/{int(rank)}".encode(), digest_size=32,
                                                      person=b"kloop-mask").digest()))
    for stream, tensor in enumerate(tensors):
        if not tensor.is_contiguous():
            raise ValueError("a masked tensor must be contiguous")
        size = tensor.numel() * tensor.element_size()
        if size:
            device_kernels.launch("kloop_mask_chacha20", -(-size // 64), [tensor, size, *words, stream], tensor.device)


def masked(torch, tensors: list, key: int, rank: int) -> list:
    """Masked contiguous copies of ``tensors`` (the originals unchanged; each copy requires grad
    where its original does, which a blob records)."""
    copies = [torch.clone(tensor.detach(), memory_format=torch.contiguous_format) for tensor in tensors]
    apply(torch, copies, key, rank)
    return [copy.requires_grad_(tensor.requires_grad) for copy, tensor in zip(copies, tensors)]
