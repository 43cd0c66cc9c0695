"""The correctness criterion: against the upcast reference, bound by the native reference's own error."""

import os
import torch

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
