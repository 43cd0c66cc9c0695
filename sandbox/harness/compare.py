"""Is a candidate's output right? Judged against the reference run on upcast inputs.

The allowed error of each element is the problem's tolerance floor plus ``SLACK`` times the
worst error of the native-precision reference itself, and the candidate's RMS error may be at
most ``SLACK`` times the native reference's plus the floor. So a kernel more accurate than the
bf16 NCCL reference (one that accumulates in fp32, say) always passes, and one much less
accurate (fp8 transfers, a dropped rank, one bad block) fails. Integer outputs must match
exactly. Shape and dtype must be the native reference's. NaN passes only where the reference
has NaN. Float8 outputs (fp8 payloads of low-precision problems) are compared by value, in fp32:
torch implements little arithmetic on float8 tensors.
"""

from __future__ import annotations

from sandbox.harness.calls import Expected as ReferenceOutput
from sandbox.report import Mismatch

SLACK = 2.0


def compare_outputs(reference: ReferenceOutput, got: list, atol: float, rtol: float, rank: int, trial: int) -> Mismatch | None:
    if len(got) != len(reference.expected):
        return Mismatch(rank=rank, trial=trial, kind="type",
                        detail=f"returned {len(got)} tensors, the reference returns {len(reference.expected)}")
    for index, (expected, output) in enumerate(zip(reference.expected, got)):
        mismatch = compare_tensor(
            expected, reference.shapes[index], reference.dtypes[index], reference.native_max_abs_err[index],
            reference.native_rms_err[index], output, atol, rtol,
        )
        if mismatch is not None:
            return mismatch.model_copy(update={"rank": rank, "trial": trial, "output_index": index})
    return None


def compare_tensor(expected, shape, dtype: str, native_max: float, native_rms: float, got, atol: float, rtol: float) -> Mismatch | None:
    import torch

    if not isinstance(got, torch.Tensor):
        return Mismatch(rank=-1, trial=-1, kind="type", detail=f"returned {got}, not a tensor")
    if tuple(got.shape) != tuple(shape):
        return Mismatch(rank=-1, trial=-1, kind="shape", detail=f"shape {tuple(got.shape)}, expected {tuple(shape)}")
    if str(got.dtype).removeprefix("torch.") != dtype:
        return Mismatch(rank=-1, trial=-1, kind="dtype", detail=f"dtype {str(got.dtype).removeprefix('torch.')}, expected {dtype}")
    numel = got.numel()
    if numel == 0:
        return None
    if not got.is_floating_point() and not got.is_complex():
        wrong = got != expected.to(got.dtype)
        count = int(wrong.sum())
        if count == 0:
            return None
        flat = int(wrong.flatten().nonzero()[0])
        return Mismatch(
            rank=-1, trial=-1, kind="values", numel=numel, mismatched=count, detail=f"{count} of {numel} elements differ",
            worst_index=_unravel(flat, got.shape), worst_expected=float(expected.flatten()[flat]), worst_got=float(got.flatten()[flat]),
        )
    work = torch.float64 if expected.dtype == torch.float64 else torch.float32
    hi, lo = expected.to(work), got.to(work)
    nan_expected, nan_got = hi.isnan(), lo.isnan()
    nan_wrong = int((nan_expected != nan_got).sum())
    if nan_wrong:
        first = int((nan_expected != nan_got).flatten().nonzero()[0])
        index = _unravel(first, got.shape)
        return Mismatch(
            rank=-1, trial=-1, kind="nan", numel=numel, mismatched=nan_wrong, nans=int(nan_got.sum()),
            detail=f"{int(nan_got.sum())} NaN in the output where the reference has {int(nan_expected.sum())} (first at {index})",
            worst_index=index, worst_expected=float(hi.flatten()[first]), worst_got=float(lo.flatten()[first]),
        )
    same_inf = hi.isinf() & (hi == lo)
    diff = torch.where(same_inf | nan_expected, torch.zeros_like(hi), (lo - hi).abs()).nan_to_num(nan=float("inf"), posinf=float("inf"))
    magnitude = torch.where(hi.isfinite(), hi.abs(), torch.zeros_like(hi))
    bound = atol + rtol * magnitude + SLACK * native_max
    excess = diff - bound
    bad = excess > 0
    count = int(bad.sum())
    rms_err = float(diff.square().mean().sqrt())
    rms_bound = SLACK * native_rms + atol + rtol * float(magnitude.square().mean().sqrt())
    if count == 0 and rms_err <= rms_bound:
        return None
    worst = int(excess.flatten().argmax())
    max_abs = float(diff.max())
    rel = diff / magnitude.clamp_min(1e-12)
    detail = (f"{count} of {numel} elements outside the bound" if count
              else f"RMS error {rms_err:.3g} above the bound {rms_bound:.3g} (systematically less accurate than the reference)")
    return Mismatch(
        rank=-1, trial=-1, kind="values", detail=detail, numel=numel, mismatched=count, max_abs_err=max_abs,
        max_rel_err=float(rel.max()), rms_err=rms_err, rms_bound=rms_bound, worst_index=_unravel(worst, got.shape),
        worst_expected=float(hi.flatten()[worst]), worst_got=float(lo.flatten()[worst]), worst_bound=float(bound.flatten()[worst]),
        reference_max_abs_err=native_max,
    )


def _unravel(flat: int, shape) -> list[int]:
    index = []
    for size in reversed(tuple(shape)):
        index.append(flat % size)
        flat //= size
    return list(reversed(index))


def error_summary(reference: ReferenceOutput, got: list) -> tuple[float, float]:
    """Max absolute and relative error over all outputs (for per-rank verdicts of passing ranks)."""
    import torch

    max_abs = max_rel = 0.0
    for expected, output in zip(reference.expected, got):
        if isinstance(output, torch.Tensor) and output.is_floating_point() and output.shape == expected.shape and output.numel():
            wide = expected.to(torch.float64)
            diff = (output.to(torch.float64) - wide).abs().nan_to_num(0.0)
            max_abs = max(max_abs, float(diff.max()))
            max_rel = max(max_rel, float((diff / wide.abs().clamp_min(1e-6)).max()))
    return max_abs, max_rel
