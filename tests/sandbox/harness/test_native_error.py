"""The native reference's own error, which sets every solution's bound (sandbox/harness/reference_rank.py)."""

import math

import torch

from sandbox.harness.compare import compare_tensor
from sandbox.harness.reference_rank import native_error


def test_values_both_runs_agree_on_carry_no_error():
    """A fully masked row (-inf in both runs) and a NaN in both: before, inf - inf made the error NaN,
    and every solution, the reference itself included, was judged wrong."""
    upcast = torch.tensor([1.0, float("-inf"), float("nan"), 3.0])
    native = torch.tensor([1.0078125, float("-inf"), float("nan"), 3.0], dtype=torch.bfloat16)
    max_err, rms_err = native_error(torch, native, upcast)
    assert max_err == 0.0078125 and math.isfinite(rms_err)
    assert compare_tensor(upcast, (4,), "bfloat16", max_err, rms_err, native, 1e-3, 2**-8) is None  # the reference passes
    wrong = torch.tensor([2.0, float("-inf"), float("nan"), 3.0], dtype=torch.bfloat16)
    assert compare_tensor(upcast, (4,), "bfloat16", max_err, rms_err, wrong, 1e-3, 2**-8) is not None


def test_a_native_run_that_differs_where_the_upcast_is_finite_keeps_its_error():
    upcast = torch.tensor([1.0, 2.0])
    assert native_error(torch, torch.tensor([1.0, float("inf")]), upcast)[0] == float("inf")
    assert math.isnan(native_error(torch, torch.tensor([1.0, float("nan")]), upcast)[0])
    assert native_error(torch, torch.tensor([]), torch.tensor([])) == (0.0, 0.0)
