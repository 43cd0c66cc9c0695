"""Is a candidate's output right? Judged against the reference run on upcast inputs.

The allowed error of each element is the problem's tolerance floor plus ``SLACK`` times the
worst error of the native-precision reference itself, and the candidate's RMS error may be at
most ``SLACK`` times the native reference's plus the floor. So a kernel more accurate than the
bf16 NCCL reference (one that accumulates in fp32, say) always passes, and one much less
accurate (fp8 transfers, a dropped rank, one bad block) fails. Integer outputs must match
exactly. Shape and dtype must be the native reference's. NaN passes only where the reference
has NaN. Float8 outputs (fp8 payloads of low-precision problems) are compared by value, in fp32:
torch implements little arithmetic on float8 tensors.

Where every output element is a sum of products of inputs (``ProblemSpec.sum_of_products``), what
rounding can do to each element is known: at most ``atol`` plus (world + 1) units of roundoff of
the output's dtype (or ``rtol``, where coarser) times the sum of its terms' magnitudes (the
reference run on the inputs' magnitudes), the textbook componentwise bound of a sum of W terms
rounded after every addition, with room for a rounded partial product per rank: no honest order
of the sums in the dtype or finer strays further. An element inside it passes even where the
bound above is tighter: that bound's scale, the native run's worst error, is a sample maximum, and
over a few elements an honest order's worst error exceeds twice it (a bf16 ring's gradient
average on 16-element biases at worlds 4 and 8, against gloo's: ``wrong`` in 5 of 7 evaluations;
tests/fixtures/honest/ddp_average_bf16_rotated_sums.py). And no element may stray ``SLACK`` times
further: the bound above let a lossy transfer through (block-scaled int8: each value rounded to a
step set by the largest in its block), which loses the small values beside large ones.
"""

from __future__ import annotations

import math

from sandbox.harness.calls import Expected as ReferenceOutput
from sandbox.report import Mismatch

SLACK = 2.0
CHUNK_ELEMENTS = 1 << 22  # elements compared at a time: a few pieces (each op is a parallel region), temporaries bounded


def compare_outputs(reference: ReferenceOutput, got: list, atol: float, rtol: float, rank: int, trial: int,
                    world: int = 1) -> Mismatch | None:
    if len(got) != len(reference.expected):
        return Mismatch(rank=rank, trial=trial, kind="type",
                        detail=f"returned {len(got)} tensors, the reference returns {len(reference.expected)}")
    for index, (expected, output) in enumerate(zip(reference.expected, got)):
        overflowed = reference.native_overflowed[index] if index < len(reference.native_overflowed) else 0
        terms = reference.magnitudes[index] if index < len(reference.magnitudes) else None
        mismatch = compare_tensor(
            expected, reference.shapes[index], reference.dtypes[index], reference.native_max_abs_err[index],
            reference.native_rms_err[index], output, atol, rtol, overflowed,
            None if terms is None else (terms, world),
        )
        if mismatch is not None:
            return mismatch.model_copy(update={"rank": rank, "trial": trial, "output_index": index})
    return None


def honest_rounding(magnitudes, dtype: str, rtol: float, world: int, atol: float):
    """Per element, the most honest rounding may move it, from its terms' magnitudes (module
    docstring): a unit of roundoff is the dtype's, or ``rtol`` where that is coarser (a float32 run
    of a problem whose tolerance is set for bf16 may use TF32 arithmetic, as the value bound allows)."""
    import torch

    return magnitudes * ((world + 1) * max(torch.finfo(getattr(torch, dtype)).eps / 2, rtol)) + atol


def _element_bound(value_bound, rounding, atol: float):
    """Each element's allowed error (module docstring): the value bound, or honest ``rounding``'s
    where that is larger; never beyond ``SLACK`` times honest rounding's."""
    import torch

    if rounding is None:
        return value_bound
    return torch.minimum(torch.maximum(value_bound, rounding), rounding * SLACK - (SLACK - 1) * atol)


def compare_tensor(expected, shape, dtype: str, native_max: float, native_rms: float, got, atol: float, rtol: float,
                   overflowed: int = 0, terms: tuple | None = None) -> Mismatch | None:
    """``got`` against ``expected`` within the bound the native run's error sets; up to
    ``overflowed`` elements (as many as the native run itself made non-finite where the upcast one
    did not, or the other way round) may be non-finite on one side only. ``terms``, where given, is
    (each element's terms' magnitudes, the world size): each element is held to what rounding allows too."""
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
    rounding = honest_rounding(terms[0].to(got.device, work), dtype, rtol, terms[1], atol) if terms is not None else None
    if _within_bounds(expected, got, work, atol, rtol, native_max, native_rms, rounding):
        return None
    hi, lo = expected.to(work), got.to(work)
    nan_expected, nan_got = hi.isnan(), lo.isnan()
    excused = ~(hi.isfinite() & lo.isfinite()) & ~((nan_expected & nan_got) | (hi.isinf() & (hi == lo)))
    if not overflowed or int(excused.sum()) > overflowed:
        excused = torch.zeros_like(excused)
    nan_wrong = int(((nan_expected != nan_got) & ~excused).sum())
    if nan_wrong:
        first = int(((nan_expected != nan_got) & ~excused).flatten().nonzero()[0])
        index = _unravel(first, got.shape)
        return Mismatch(
            rank=-1, trial=-1, kind="nan", numel=numel, mismatched=nan_wrong, nans=int(nan_got.sum()),
            detail=f"{int(nan_got.sum())} NaN in the output where the reference has {int(nan_expected.sum())} (first at {index})",
            worst_index=index, worst_expected=float(hi.flatten()[first]), worst_got=float(lo.flatten()[first]),
        )
    same_inf = hi.isinf() & (hi == lo)
    diff = torch.where(same_inf | nan_expected | excused, torch.zeros_like(hi), (lo - hi).abs()).nan_to_num(nan=float("inf"),
                                                                                                          posinf=float("inf"))
    magnitude = torch.where(hi.isfinite(), hi.abs(), torch.zeros_like(hi))
    value_bound = atol + rtol * magnitude + SLACK * native_max
    bound = _element_bound(value_bound, rounding, atol)
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
    if count and rounding is not None and not bool((bad & (diff > value_bound)).any()):
        detail = (f"{count} of {numel} elements are further from the exact result than rounding in {dtype} can take them, "
                  "for the sizes of the terms summed into them (the reference on the inputs' magnitudes): a lossy step, such "
                  "as a transfer in int8 or fp8, loses values much smaller than their neighbours")
    elif count:
        detail = f"{count} of {numel} elements outside the bound"
    else:
        detail = f"RMS error {rms_err:.3g} above the bound {rms_bound:.3g} (systematically less accurate than the reference)"
    return Mismatch(
        rank=-1, trial=-1, kind="values", detail=detail, numel=numel, mismatched=count, max_abs_err=max_abs,
        max_rel_err=float(rel.max()), rms_err=rms_err, rms_bound=rms_bound, worst_index=_unravel(worst, got.shape),
        worst_expected=float(hi.flatten()[worst]), worst_got=float(lo.flatten()[worst]), worst_bound=float(bound.flatten()[worst]),
        reference_max_abs_err=native_max,
    )


def _chunks(expected, got, work, *others):
    """The tensors flat, in pieces small enough to stay in cache, in the working precision (None stays None)."""
    flat = [t.reshape(-1) if t is not None else None for t in (expected, got, *others)]
    for start in range(0, flat[1].numel(), CHUNK_ELEMENTS):
        yield tuple(t[start:start + CHUNK_ELEMENTS].to(work) if t is not None else None for t in flat)


def _within_bounds(expected, got, work, atol: float, rtol: float, native_max: float, native_rms: float,
                   rounding=None) -> bool:
    """The common case, cheaply: every element finite and inside its bound, and the RMS error
    inside its own; the same arithmetic as the full check below, which decides (and describes)
    everything else: a non-finite element, a mismatch. (The full check makes two dozen passes over
    tensors the size of the output: 4 s for 32M elements on 2 cores.) A NaN or infinity anywhere
    makes a sum of squares non-finite (and a NaN is never counted outside its bound)."""
    import torch

    diff_squares, magnitude_squares = 0.0, 0.0
    for hi, lo, honest in _chunks(expected, got, work, rounding):
        diff = lo.sub(hi).abs_()
        magnitude = hi.abs()
        if bool((diff > _element_bound((atol + rtol * magnitude).add_(SLACK * native_max), honest, atol)).any()):
            return False
        diff_squares += float(torch.dot(diff, diff))
        magnitude_squares += float(torch.dot(magnitude, magnitude))
    if not (math.isfinite(diff_squares) and math.isfinite(magnitude_squares)):
        return False
    numel = got.numel()
    rms_bound = SLACK * native_rms + atol + rtol * math.sqrt(magnitude_squares / numel)
    return math.sqrt(diff_squares / numel) <= rms_bound


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
            for wide, narrow in _chunks(expected, output, torch.float64 if expected.dtype == torch.float64 else torch.float32):
                diff = (narrow - wide).abs_().nan_to_num_(0.0)  # never in place on a piece: it may be a view of the output
                max_abs = max(max_abs, float(diff.max()))
                max_rel = max(max_rel, float(diff.div_(wide.abs().clamp_min_(1e-6)).max()))
    return max_abs, max_rel
