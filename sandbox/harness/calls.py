"""The calls of an evaluation as the parent holds them: each call's inputs on every rank (the
sealed blobs the reference made; on a GPU, device blobs with their two allocations), what the
reference expects where it was asked, and what a candidate rank showed when asked to reveal a call.

Keys, never seen by a rank, name the calls: a trial's key mixes its public seed with the host
secret (reproducible on this host, unguessable elsewhere); timed calls take keys from a counter
mixed the same way; which timed calls are checked is drawn from the system's randomness, so not
even a rerun of the same evaluation predicts it.
"""

from __future__ import annotations

import hashlib
import os
import random
import secrets
from dataclasses import dataclass, field
from typing import Any

from sandbox.harness.seeds import mixed_seed
from sandbox.rank import input_mask, wire
from sandbox.rank.commitment import commitment as commit_to

MAX_EXPECTED_BYTES = 64 * 2**30
TIMED_KEY_BASE = 10_000


class CallPlan:
    def __init__(self, secret: bytes, seed: int, trials: int):
        self.secret, self.seed, self.trials = secret, seed, trials
        self._next = 0
        self._chooser = random.SystemRandom()

    def trial_keys(self) -> list[int]:
        return [mixed_seed(self.seed + t, self.secret) for t in range(self.trials)]

    def recheck_key(self) -> int:
        return mixed_seed(self.seed + self.trials, self.secret)

    def fresh_keys(self, count: int) -> list[int]:
        keys = [mixed_seed(self.seed + TIMED_KEY_BASE + self._next + i, self.secret) for i in range(count)]
        self._next += count
        return keys

    def rng(self, key: int) -> int:
        """The global RNG seed a call runs under (reference and candidate alike): derived from the
        secret apart from the inputs' key, so knowing it tells nothing about the inputs."""
        return int.from_bytes(hashlib.sha256(self.secret + b"global-rng" + key.to_bytes(8, "little")).digest()[:7], "little")

    def checked(self, count: int, share: float) -> list[int]:
        """A secret choice of which of ``count`` calls get checked (at least one)."""
        return sorted(self._chooser.sample(range(count), max(1, min(count, round(count * share)))))


@dataclass
class Expected:
    """The reference's answer for one call on one rank: ``expected`` (upcast outputs, then the
    final state of each input it updates in place, ``mutated`` by leaf index), their native
    shapes and dtypes, and how far the native-precision run is from the upcast one."""

    expected: list
    outputs: int
    mutated: list[int]
    shapes: list[tuple[int, ...]]
    dtypes: list[str]
    native_max_abs_err: list[float]
    native_rms_err: list[float]
    native_overflowed: list[int] = field(default_factory=list)  # per output: elements only one run made non-finite
    nearly_constant_inputs: bool = False
    originals: list = field(default_factory=list)  # the call's inputs as the reference made them, before any call
    magnitudes: list = field(default_factory=list)  # per output, the reference on the inputs' magnitudes (sum_of_products)
    native: list | None = None

    @classmethod
    def read(cls, summary: dict[str, Any], fds: list[int], device: Any = None) -> "Expected":
        """The expectation in the reference's blob at the head of ``fds`` (taken off and closed:
        a long-lived harness that kept the file would hold every call's outputs for good): the
        tensors are copies, on ``device``, where it is compared, else the CPU."""
        _, tensors = wire.read_blob(fds, MAX_EXPECTED_BYTES, device, pooled=True)  # the reference writes a memfd again later
        count, inputs, magnitudes = len(summary["shapes"]), int(summary["inputs"]), int(summary.get("magnitudes", 0))
        if not (0 <= inputs and 0 <= magnitudes <= summary["outputs"] and inputs + magnitudes <= len(tensors) - count):
            raise wire.WireError("an expectation without the call's inputs")
        after = count + inputs + magnitudes
        return cls(expected=tensors[:count], outputs=summary["outputs"], mutated=list(summary["mutated"]),
                   shapes=[tuple(s) for s in summary["shapes"]], dtypes=list(summary["dtypes"]),
                   native_max_abs_err=[float(v) for v in summary["native_max_abs_err"]],
                   native_rms_err=[float(v) for v in summary["native_rms_err"]],
                   native_overflowed=[int(v) for v in summary.get("native_overflowed", [])],
                   nearly_constant_inputs=bool(summary.get("nearly_constant_inputs")),
                   originals=tensors[count:count + inputs], magnitudes=tensors[count + inputs:after], native=tensors[after:] or None)


@dataclass
class Inputs:
    """A call's inputs on one rank, as the reference made them: a sealed blob (``blob``) of
    ``nbytes`` tensor bytes; for a device blob, the bytes in two allocations of device memory:
    ``lent`` goes to the candidate's rank, which may write it (no one reads it afterwards),
    ``kept`` only ever to the reference's."""

    blob: int
    nbytes: int
    lent: int | None = None
    kept: int | None = None

    @classmethod
    def taken(cls, summary: dict[str, Any], fds: list[int]) -> Inputs:
        """The inputs a reference rank's ``made`` entry ``summary`` describes, taken off the head of ``fds``."""
        held = [fds.pop(0) for _ in range(3 if summary["device"] else 1)]
        return cls(held[0], int(summary["input_bytes"]), *held[1:])

    def for_group(self, trusted: bool) -> list[int]:
        """The descriptors a rank of the reference's group (``trusted``) or the candidate's stages from."""
        if self.lent is None:
            return [self.blob]
        return [self.blob, self.kept if trusted else self.lent]

    def close(self) -> None:
        for fd in (self.blob, self.lent, self.kept):
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass


@dataclass
class Call:
    """One call: its key, RNG seed, inputs per rank (owned here), and the reference's
    expectation per rank where it was asked for one."""

    label: int  # shown in reports: trial number, or the timed call's number
    key: int
    rng: int
    nonce: bytes = field(default_factory=lambda: secrets.token_bytes(16))  # sent with the call, bound into its commitment
    mask: int = field(default_factory=input_mask.new_key)  # the key of its inputs' mask on a device, sent with the call
    inputs: list[Inputs] = field(default_factory=list)
    expected: list[Expected | None] = field(default_factory=list)

    def close(self) -> None:
        for held in self.inputs:
            held.close()
        self.inputs = []


@dataclass
class Commitment:
    """What a rank sent when a call ended: its ``checksum`` and, where the group's scheme is the
    transposed one, ``sealed``, the sealed memfd (owned here) holding the bytes it hashed."""

    checksum: str
    sealed: int | None = None

    def close(self) -> None:
        if self.sealed is not None:
            try:
                os.close(self.sealed)
            except OSError:
                pass
            self.sealed = None


def close_commitments(rows: list[list[Commitment]]) -> None:
    for row in rows:
        for held in row:
            held.close()


@dataclass
class Revealed:
    """What a candidate rank showed of one call: its outputs and its inputs' final state."""

    outputs: list
    inputs: list

    @classmethod
    def read(cls, fds: list[int], max_bytes: int, device: Any = None) -> "Revealed":
        """The revealed blob at the head of ``fds`` (taken off and closed) as tensors (on
        ``device``, else the CPU)."""
        count, tensors = wire.read_blob(fds, max_bytes, device)  # the tree: the number of outputs; the inputs follow them
        if not isinstance(count, int) or isinstance(count, bool) or not 0 <= count <= len(tensors):
            raise wire.WireError("a revealed call without its output count")
        return cls(outputs=tensors[:count], inputs=tensors[count:])

    def commitment(self, scheme: str, nonce: bytes) -> str:
        return commit_to([*self.outputs, *self.inputs], scheme, nonce)


def same_bytes(before: Any, after: Any) -> bool:
    """Whether two tensors have one dtype, one shape and the same bytes (NaN payloads and the sign
    of zero included)."""
    import torch

    if before.dtype != after.dtype or before.shape != after.shape:
        return False
    flat_before = before.detach().reshape(-1).view(torch.uint8)
    flat_after = after.detach().reshape(-1).view(torch.uint8)
    return torch.equal(flat_before, flat_after.to(flat_before.device))
