"""Turning what the ranks showed into a verdict: every checked call, every rank, against the
reference; the first failing call names the rank, the element and the likely cause.

A rank's revealed bytes must be the ones it committed to when the call ended and, where it sent
one, the copy it sealed then (else the judge was lied to: ``rejected``); its inputs must come back as they went in, byte for byte, except those the
reference itself updates in place, which must then hold what the reference leaves in them. (On the
CPU the parent has already compared the memory it staged the inputs in, after the call:
sandbox/harness/staged_inputs.py; the revealed inputs are what a GPU rank can be judged on.)
"""

from __future__ import annotations

from typing import Any

from problems.contract import ProblemSpec
from sandbox.harness.calls import Call, Commitment, Expected, Revealed, same_bytes
from sandbox.harness.compare import compare_outputs, error_summary
from sandbox.harness.verdict import Verdict
from sandbox.rank.commitment import matches_sealed
from sandbox.report import Mismatch, RankVerdict


def judge(calls: list[Call], revealed: list[list[Revealed]], committed: list[list[Commitment]], spec: ProblemSpec, device: Any,
          scheme: str, back_to_back_from: int | None = None, note: str | None = None) -> list[RankVerdict]:
    """Verdicts of every rank when all is right; raises :class:`Verdict` at the first call that
    fails ("wrong"), or when a rank's revealed bytes are not what it committed to ("rejected").
    ``revealed[i][r]`` and ``committed[i][r]`` belong to ``calls[i]`` on rank r; ``scheme`` is the
    group's commitment scheme (sandbox/rank/commitment.py)."""
    world = len(revealed[0]) if revealed else 0
    first: Mismatch | None = None
    verdicts: list[RankVerdict] = []
    last_errors: list[tuple[float, float]] = []
    for position, call in enumerate(calls):
        for rank in range(world):
            shown, held = revealed[position][rank], committed[position][rank]
            if shown.commitment(scheme, call.nonce) != held.checksum:
                raise Verdict("rejected", f"rank {rank}: the outputs it showed for call {call.label} are not the ones it committed "
                              "to when the call ended (outputs computed or changed after the timer stopped)")
            if held.sealed is not None and not matches_sealed(held.sealed, [*shown.outputs, *shown.inputs]):
                raise Verdict("rejected", f"rank {rank}: the outputs it showed for call {call.label} are not the copy it sealed "
                              "when the call ended (bytes that did not exist then: made when it was asked to show them)")
            expected = call.expected[rank]
            mismatch = _check_call(expected, shown, spec, device, rank, call.label, world)
            if mismatch is None and position == len(calls) - 1:
                last_errors.append(error_summary(_on(expected, device), [x.to(device) for x in _judged(expected, shown)]))
            if mismatch is not None and first is None:
                first = mismatch
            if first is not None and mismatch is not None and mismatch.trial == first.trial:
                verdicts.append(RankVerdict(rank=rank, ok=False, message=mismatch.detail, max_abs_err=mismatch.max_abs_err,
                                            max_rel_err=mismatch.max_rel_err))
        if first is not None:
            break
    if first is None:
        return [RankVerdict(rank=rank, ok=True, max_abs_err=a, max_rel_err=r) for rank, (a, r) in enumerate(last_errors)]
    failed = {v.rank for v in verdicts}
    verdicts += [RankVerdict(rank=r, ok=True) for r in range(world) if r not in failed]
    verdicts.sort(key=lambda v: v.rank)
    where = f"rank {first.rank}, call {first.trial}" + (f", output {first.output_index}" if first.output_index else "")
    message = f"wrong on {len(failed)} of {world} ranks; first: {where}: {first.detail}"
    if first.kind == "values" and first.worst_index:
        message += (f" (at {first.worst_index}: expected {first.worst_expected:.6g}, got {first.worst_got:.6g}, "
                    f"allowed error {first.worst_bound:.3g})")
    notes = []
    if back_to_back_from is not None and calls.index(next(c for c in calls if c.label == first.trial)) >= back_to_back_from:
        notes.append("the first call was right; later calls, made back-to-back without a host sync, were wrong: "
                     "a missing barrier, or signal flags reused across calls without an epoch?")
    if note:
        notes.append(note)
    raise Verdict("wrong", message, ranks=verdicts, mismatch=first, notes=notes)


def _judged(expected: Expected, shown: Revealed) -> list:
    """What is compared with the reference: the outputs, then the inputs it updates in place."""
    return [*shown.outputs, *(shown.inputs[i] for i in expected.mutated if i < len(shown.inputs))]


def _check_call(expected: Expected, shown: Revealed, spec: ProblemSpec, device: Any, rank: int, label: int,
                world: int) -> Mismatch | None:
    if len(shown.outputs) != expected.outputs:
        return Mismatch(rank=rank, trial=label, kind="type",
                        detail=f"returned {len(shown.outputs)} tensors, the reference returns {expected.outputs}")
    original = [t.to(shown.inputs[0].device) for t in expected.originals] if shown.inputs else expected.originals
    if len(shown.inputs) != len(original):
        return Mismatch(rank=rank, trial=label, kind="input_modified", detail="the inputs did not come back whole")
    if not spec.in_place:
        for index, (before, after) in enumerate(zip(original, shown.inputs)):
            if index not in expected.mutated and not same_bytes(before, after):
                return Mismatch(rank=rank, trial=label, kind="input_modified",
                                detail=f"input tensor {index} was modified; solutions must not write their inputs")
    return compare_outputs(_on(expected, device), [x.to(device) for x in _judged(expected, shown)], spec.atol, spec.rtol, rank, label,
                           world)


def _on(expected: Expected, device: Any) -> Expected:
    import dataclasses

    return dataclasses.replace(expected, expected=[t.to(device) for t in expected.expected])
