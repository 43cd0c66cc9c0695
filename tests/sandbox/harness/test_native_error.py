"""The native reference's own error, which sets every solution's bound (sandbox/harness/reference_rank.py),
and how the comparison uses it (sandbox/harness/compare.py)."""

import math

import torch

from sandbox.harness.compare import compare_tensor
from sandbox.harness.reference_rank import native_error

INF, NAN = float("inf"), float("nan")


def _compare(upcast, got, error):
    return compare_tensor(upcast, tuple(upcast.shape), str(got.dtype).removeprefix("torch."), error.max_abs, error.rms, got,
                          1e-3, 2**-8, error.overflowed)


def test_values_both_runs_agree_on_carry_no_error():
    """A fully masked row (-inf in both runs) and a NaN in both: before, inf - inf made the error NaN,
    and every solution, the reference itself included, was judged wrong."""
    upcast = torch.tensor([1.0, -INF, NAN, 3.0])
    native = torch.tensor([1.0078125, -INF, NAN, 3.0], dtype=torch.bfloat16)
    error = native_error(torch, native, upcast)
    assert error == (0.0078125, error.rms, 0) and math.isfinite(error.rms)
    assert _compare(upcast, native, error) is None  # the reference passes
    assert _compare(upcast, torch.tensor([2.0, -INF, NAN, 3.0], dtype=torch.bfloat16), error) is not None


def test_a_native_overflow_no_longer_lets_any_output_pass():
    """The native run overflowed where the upcast one did not: before, its error was infinite, and so
    was every solution's bound. Now the error is the finite elements' and the overflow is counted: a
    solution may overflow there too (as the reference did), and nothing else goes."""
    upcast = torch.tensor([1.0, 2.0, 70000.0, 4.0])
    native = torch.tensor([1.0, 2.0, INF, 4.0], dtype=torch.float16)
    error = native_error(torch, native, upcast)
    assert error.max_abs == 0.0 and error.overflowed == 1
    assert _compare(upcast, native, error) is None  # the reference's own overflow
    assert _compare(upcast, torch.tensor([1.0, 2.0, 65504.0, 4.0], dtype=torch.float16), error) is not None  # outside the bound
    assert _compare(upcast, torch.tensor([9.0, 2.0, INF, 4.0], dtype=torch.float16), error) is not None  # garbage elsewhere
    assert _compare(upcast, torch.tensor([1.0, NAN, INF, 4.0], dtype=torch.float16), error) is not None  # two, not one
    assert native_error(torch, torch.tensor([1.0, NAN]), torch.tensor([1.0, 2.0])).overflowed == 1
    assert native_error(torch, torch.tensor([]), torch.tensor([])) == (0.0, 0.0, 0)
