"""Turning the ranks' outputs into a verdict: every rank, every trial, against the expected
outputs; the first failing trial names the rank, the element and the likely cause."""

from __future__ import annotations

import dataclasses
from typing import Any

from problems.spec import ProblemSpec
from sandbox.harness import protocol as p
from sandbox.harness.compare import compare_outputs, error_summary
from sandbox.report import Mismatch, RankVerdict


class Verdict(Exception):
    """Ends the evaluation with ``status``; ``fields`` go into the report."""

    def __init__(self, status: str, message: str, **fields: Any):
        super().__init__(message)
        self.status, self.message, self.fields = status, message, fields



def judge(expected: list[list[p.ReferenceOutput]], per_rank: list[list[p.CandidateOutput]], trial_indices: list[int],
          spec: ProblemSpec, device: Any, back_to_back_from: int | None = None, after_timing: bool = False) -> list[RankVerdict]:
    """Verdicts of every rank when all is right; raises :class:`Verdict` ("wrong") at the first
    trial that fails, with every rank's verdict for that trial. ``per_rank[r][i]`` is rank r's
    output for trial ``trial_indices[i]``; ``expected[r][t]`` the reference's for trial t."""
    world = len(per_rank)
    verdicts: list[RankVerdict] = []
    first: Mismatch | None = None
    last_errors: list[tuple[float, float]] = []  # per rank, for the last trial: what passing verdicts report
    for position, trial in enumerate(trial_indices):
        for rank in range(world):
            output = per_rank[rank][position]
            if output.modified_inputs and not spec.in_place:
                mismatch = Mismatch(rank=rank, trial=trial, kind="input_modified",
                                    detail=f"input {output.modified_inputs[0]} was modified; solutions must not write their inputs")
            else:
                wanted, got = on_device(expected[rank][trial], device), on_device(output, device).outputs
                mismatch = compare_outputs(wanted, got, spec.atol, spec.rtol, rank, trial)
                if mismatch is None and position == len(trial_indices) - 1:
                    last_errors.append(error_summary(wanted, got))  # while on ``device``: no second transfer
            if mismatch is not None and first is None:
                first = mismatch
            if first is not None and mismatch is not None and mismatch.trial == first.trial:
                verdicts.append(RankVerdict(rank=rank, ok=False, message=mismatch.detail,
                                            max_abs_err=mismatch.max_abs_err, max_rel_err=mismatch.max_rel_err))
        if first is not None:
            break
    if first is None:
        return [RankVerdict(rank=rank, ok=True, max_abs_err=max_abs, max_rel_err=max_rel) for rank, (max_abs, max_rel) in enumerate(last_errors)]
    failed_ranks = {v.rank for v in verdicts}
    verdicts += [RankVerdict(rank=r, ok=True) for r in range(world) if r not in failed_ranks]
    verdicts.sort(key=lambda v: v.rank)
    where = f"rank {first.rank}, trial {first.trial}" + (f", output {first.output_index}" if first.output_index else "")
    message = f"wrong on {len(failed_ranks)} of {world} ranks; first: {where}: {first.detail}"
    if first.kind == "values" and first.worst_index:
        message += f" (at {first.worst_index}: expected {first.worst_expected:.6g}, got {first.worst_got:.6g}, allowed error {first.worst_bound:.3g})"
    notes = []
    if back_to_back_from is not None and first.trial >= back_to_back_from:
        notes.append("the first call was right; later calls, made back-to-back without a host sync, were wrong: "
                     "a missing barrier, or signal flags reused across calls without an epoch?")
    if after_timing:
        notes.append("correct before timing, wrong on fresh inputs after many calls: state that drifts across calls "
                     "(counters, flags, cached buffers)?")
    raise Verdict("wrong", message, ranks=verdicts, mismatch=first, notes=notes)


def _map_leaves(output, fn):
    """The same rank output with ``fn`` applied to each of its leaves."""

    def convert(leaves):
        return None if leaves is None else [fn(leaf) for leaf in leaves]

    if isinstance(output, p.ReferenceOutput):
        return dataclasses.replace(output, expected=convert(output.expected), native=convert(output.native))
    return dataclasses.replace(output, outputs=convert(output.outputs))


def unpacked(output):
    """Packed tensors of a rank's reply turned back into tensors (other leaves kept)."""
    return _map_leaves(output, lambda leaf: leaf.unpack() if isinstance(leaf, p.PackedTensor) else leaf)


def on_device(output, device):
    import torch

    return _map_leaves(output, lambda leaf: leaf.to(device) if isinstance(leaf, torch.Tensor) else leaf)
