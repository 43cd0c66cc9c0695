"""The correctness criterion: against the upcast reference, bound by the native reference's own error."""

import os
import torch

import pytest

from problems.authoring import mixed_magnitudes
from sandbox.harness.compare import compare_tensor


def case(n=4096, world=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    parts = [(torch.randn(n, generator=g) * 4).bfloat16() for _ in range(world)]
    exact = torch.stack([p.double() for p in parts]).sum(0)
    native = parts[0].clone()
    for p in parts[1:]:  # a bf16 ring: rounds after every add, as NCCL does
        native = (native.float() + p.float()).bfloat16()
    err = (native.double() - exact).abs()
    return exact.float(), native, float(err.max()), float(err.square().mean().sqrt())


def check(got, expected, native_max, native_rms, atol=1e-3, rtol=2**-8):
    return compare_tensor(expected, tuple(expected.shape), "bfloat16", native_max, native_rms, got, atol, rtol)


def test_native_and_more_accurate_results_pass():
    expected, native, native_max, native_rms = case()
    assert check(native, expected, native_max, native_rms) is None
    assert check(expected.bfloat16(), expected, native_max, native_rms) is None  # fp32 accumulation, one rounding
    assert (expected.bfloat16().float() - native.float()).abs().max() > 1e-2  # ... though it differs from native by more than 1e-2


def test_a_dropped_rank_and_a_single_bad_element_fail():
    expected, native, native_max, native_rms = case()
    mismatch = check((native.float() * 7 / 8).bfloat16(), expected, native_max, native_rms)
    assert mismatch is not None and mismatch.mismatched > 100
    bad = native.clone()
    bad[1234] += 0.05 * float(expected.abs().max())
    mismatch = check(bad, expected, native_max, native_rms)
    assert mismatch is not None and mismatch.mismatched == 1 and mismatch.worst_index == [1234]


def test_systematically_less_accurate_fails_on_rms():
    expected, native, native_max, native_rms = case()
    noisy = (expected * (1 + 0.02 * torch.randn(expected.shape, generator=torch.Generator().manual_seed(1)).clamp(-1, 1))).bfloat16()
    mismatch = check(noisy, expected, native_max, native_rms)
    assert mismatch is not None and mismatch.rms_err > mismatch.rms_bound


def test_shape_dtype_nan_and_integers():
    expected, native, native_max, native_rms = case(n=64)
    assert check(native.reshape(8, 8), expected, native_max, native_rms).kind == "shape"
    assert check(native.float(), expected, native_max, native_rms).kind == "dtype"
    nan = native.clone()
    nan[3] = float("nan")
    assert check(nan, expected, native_max, native_rms).kind == "nan"
    ints = torch.arange(10)
    assert compare_tensor(ints, (10,), "int64", 0, 0, ints.clone(), 0, 0) is None
    off = ints.clone()
    off[7] = 0
    mismatch = compare_tensor(ints, (10,), "int64", 0, 0, off, 0, 0)
    assert mismatch.mismatched == 1 and mismatch.worst_index == [7]


def test_float8_outputs_compare_by_value():
    from sandbox.harness.compare import error_summary
    from sandbox.harness.calls import Expected
    from sandbox.rank import wire

    values = torch.randn(256, generator=torch.Generator().manual_seed(3)) * 100
    for dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
        codes = values.to(dtype)
        fd = wire.write_blob({"T": 0}, [codes])
        with wire.Blob(fd, 2**20) as blob:  # the bytes survive the wire
            expected = blob.tensors()[0]
        os.close(fd)
        assert expected.dtype == dtype and torch.equal(expected.view(torch.uint8), codes.view(torch.uint8))
        name = str(dtype).removeprefix("torch.")
        assert compare_tensor(expected, (256,), name, 0, 0, codes.clone(), 0, 0) is None
        moved = codes.clone()
        moved[7] = (codes[7].float() * 1.5).to(dtype)
        mismatch = compare_tensor(expected, (256,), name, 0, 0, moved, 0, 0)
        assert mismatch is not None and mismatch.mismatched == 1 and mismatch.worst_index == [7]
        assert compare_tensor(expected, (256,), name, 0, 0, codes.float(), 0, 0).kind == "dtype"
        reference = Expected(expected=[expected], outputs=1, mutated=[], shapes=[(256,)], dtypes=[name], native_max_abs_err=[0.0],
                             native_rms_err=[0.0])
        assert error_summary(reference, [moved])[0] > 0


def test_the_quick_pass_agrees_with_the_full_check(monkeypatch):
    """compare_tensor first tries one cheap pass (sandbox/harness/compare.py _within_bounds) and
    leaves everything it cannot pass to the full check: on outputs that pass, miss one element,
    drift in RMS only, hold NaN or infinities, and span several pieces, both say the same; neither
    writes to the tensors it compares."""
    import sandbox.harness.compare as compare

    monkeypatch.setattr(compare, "CHUNK_ELEMENTS", 1000)  # several pieces, a partial last one
    expected, native, native_max, native_rms = case()
    one_off = native.clone()
    one_off[4000] += 3.0
    drift = (expected + 0.9 * native_max).bfloat16()  # every element inside its bound, the RMS error outside
    nan_both, nan_got = expected.clone(), native.clone()
    nan_both[7] = float("nan")
    nan_got[7] = float("nan")
    inf_same, inf_got = expected.clone(), native.clone()
    inf_same[9] = float("inf")
    inf_got[9] = float("inf")
    cases = {"native": (native, expected), "one element": (one_off, expected), "drift": (drift, expected),
             "nan where expected": (nan_got, nan_both), "nan not expected": (nan_got, expected),
             "inf where expected": (inf_got, inf_same), "inf not expected": (inf_got, expected)}
    quick = {}
    for name, (got, want) in cases.items():
        before = (got.clone(), want.clone())
        quick[name] = check(got, want, native_max, native_rms)
        assert torch.equal(got.nan_to_num(), before[0].nan_to_num()) and torch.equal(want.nan_to_num(), before[1].nan_to_num()), name
    assert quick["native"] is None and quick["nan where expected"] is None and quick["inf where expected"] is None
    assert quick["one element"].mismatched == 1 and "RMS" in quick["drift"].detail
    monkeypatch.setattr(compare, "_within_bounds", lambda *args: False)  # the full check alone
    for name, (got, want) in cases.items():
        full = check(got, want, native_max, native_rms)
        assert (full is None) == (quick[name] is None) and (full is None or full.kind == quick[name].kind), name


# ---------------------------------------------------------------- each element's rounding bound (sum_of_products)
def _int8_blocks(x, block=32):
    """What a block-scaled int8 transfer delivers: each value rounded to a step of its block's largest / 127."""
    blocks = x.float().reshape(-1, block)
    scale = blocks.abs().amax(dim=1, keepdim=True).clamp_min(1e-30) / 127.0
    return (torch.round(blocks / scale) * scale).reshape(-1)


def _sums(world, mixed, seed=0, n=8192):
    """Per-rank bf16 inputs (all_reduce's draw, its mixed regime where asked), the exact sum, the
    sum of magnitudes, and the native reference's errors (a bf16 ring)."""
    g = torch.Generator().manual_seed(seed)
    parts = []
    for _ in range(world):
        x = (torch.randn(n, generator=g) * 4).bfloat16()
        parts.append(mixed_magnitudes(x, g) if mixed else x)
    exact = torch.stack([p.double() for p in parts]).sum(0)
    terms = torch.stack([p.double().abs() for p in parts]).sum(0)
    native = parts[0].clone()
    for p in parts[1:]:
        native = native + p
    err = (native.double() - exact).abs()
    return parts, exact.float(), terms.float(), float(err.max()), float(err.square().mean().sqrt())


def _judged(got, exact, terms, native_max, native_rms, world):
    return compare_tensor(exact, tuple(exact.shape), "bfloat16", native_max, native_rms, got, 1e-3, 2**-8, terms=(terms, world))


@pytest.mark.parametrize("world", [2, 4, 8])
@pytest.mark.parametrize("mixed", [False, True])
def test_every_honest_order_of_bf16_sums_is_inside_the_rounding_bound(world, mixed):
    parts, exact, terms, native_max, native_rms = _sums(world, mixed)
    for start in range(world):  # a ring from each rank, rounding after every addition
        total = parts[start].clone()
        for step in range(1, world):
            total = total + parts[(start + step) % world]
        assert _judged(total, exact, terms, native_max, native_rms, world) is None
    assert _judged(exact.bfloat16(), exact, terms, native_max, native_rms, world) is None  # fp32 sums, one rounding


@pytest.mark.parametrize("world", [2, 4, 8])
def test_block_scaled_int8_transfers_break_the_rounding_bound_and_only_it(world):
    parts, exact, terms, native_max, native_rms = _sums(world, mixed=True)
    lossy = (parts[0].float() + sum(_int8_blocks(p) for p in parts[1:])).bfloat16()
    assert compare_tensor(exact, tuple(exact.shape), "bfloat16", native_max, native_rms, lossy, 1e-3, 2**-8) is None  # the old hole
    mismatch = _judged(lossy, exact, terms, native_max, native_rms, world)
    assert mismatch is not None and mismatch.mismatched > 10
    assert "rounding in bfloat16" in mismatch.detail and "int8" in mismatch.detail


@pytest.mark.parametrize("world", [4, 8])
def test_an_honest_orders_worst_error_over_a_few_elements_is_not_rejected(world):
    """Over 16 elements (a bias's gradient) twice the native run's worst error is a poor yardstick: a
    bf16 ring's order, rounding after every addition, beyond it is honest rounding, which the
    magnitudes bound and the value bound alone rejected."""
    rejected_before = 0
    for seed in range(100):
        g = torch.Generator().manual_seed(seed)
        parts = [(torch.randn(16, generator=g) * 2 / world).bfloat16() for _ in range(world)]
        exact = torch.stack([p.double() for p in parts]).sum(0)
        terms = torch.stack([p.double().abs() for p in parts]).sum(0).float()
        native = exact.float().bfloat16()  # accumulated in fp32, rounded once (gloo's and NCCL's may)
        err = (native.double() - exact).abs()
        native_max, native_rms = float(err.max()), float(err.square().mean().sqrt())
        for start in range(world):
            ring = parts[start].clone()
            for step in range(1, world):
                ring = ring + parts[(start + step) % world]
            assert _judged(ring, exact.float(), terms, native_max, native_rms, world) is None, (seed, start)
            plain = compare_tensor(exact.float(), (16,), "bfloat16", native_max, native_rms, ring, 1e-3, 2**-8)
            rejected_before += plain is not None
    assert rejected_before > 0  # the value bound alone rejects some honest orders
