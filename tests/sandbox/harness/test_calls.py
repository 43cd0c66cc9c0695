"""The judge's input check compares bytes, not values: a NaN's payload, the sign of a zero and a
bool's byte all count; dtype and shape must be the reference's."""

import os

import pytest
import torch

from sandbox.harness.calls import Expected, Revealed, same_bytes
from sandbox.rank import wire
from tests.support.blobs import device_header


def _with_bits(tensor: torch.Tensor, index: int, bits: int) -> torch.Tensor:
    changed = tensor.clone()
    changed.view(torch.int32 if tensor.element_size() == 4 else torch.uint8)[index] = bits
    return changed


def test_equal_tensors_have_the_same_bytes():
    x = torch.tensor([1.0, float("nan"), -0.0, float("inf")])
    assert same_bytes(x, x.clone())


def test_a_changed_nan_payload_or_sign_of_zero_is_a_change():
    x = torch.tensor([1.0, float("nan"), 0.0])
    other_nan = _with_bits(x, 1, 0x7FC00001)
    assert torch.isnan(other_nan[1]) and not same_bytes(x, other_nan)
    assert not same_bytes(x, torch.tensor([1.0, float("nan"), -0.0]))


def test_a_bool_byte_other_than_one_is_a_change():
    x = torch.tensor([True, False, True])
    assert not same_bytes(x, _with_bits(x, 0, 2))


def test_dtype_and_shape_must_match():
    x = torch.arange(6, dtype=torch.int32)
    assert not same_bytes(x, x.reshape(2, 3))
    assert not same_bytes(x, x.view(torch.float32))
    assert same_bytes(x.reshape(2, 3).t().contiguous().t(), x.reshape(2, 3))


def test_a_revealed_blob_and_an_expectation_with_its_inputs_read_back_as_written():
    inputs = [torch.randn(5, 3).to(torch.bfloat16), torch.tensor([3], dtype=torch.int64)]
    outputs = [inputs[0].float() * 2]
    revealed_fd = wire.write_blob(1, outputs + inputs, name="revealed")
    expected_fd = wire.write_blob(1, outputs + inputs, name="expected")  # the reference's layout: expectations, then the inputs
    summary = {"outputs": 1, "mutated": [], "shapes": [[5, 3]], "dtypes": ["float32"], "native_max_abs_err": [0.0],
               "native_rms_err": [0.0], "inputs": 2}
    given = [revealed_fd]
    shown = Revealed.read(given, 2**20)
    assert given == [] and _closed(revealed_fd)  # taken off the list and closed
    expected = Expected.read(summary, [expected_fd])
    assert _closed(expected_fd)
    assert len(shown.outputs) == 1 and torch.equal(shown.outputs[0], outputs[0])
    assert torch.equal(expected.expected[0], outputs[0]) and expected.native is None
    assert all(same_bytes(a, b) for a, b in zip(expected.originals, shown.inputs)) and len(expected.originals) == 2


def _closed(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return True
    return False


def test_a_device_blob_without_its_device_memory_is_refused_and_both_descriptors_are_taken():
    header = device_header(1, [torch.zeros(4)])
    with pytest.raises(wire.WireError, match="without its device memory"):
        Revealed.read([header], 2**20)
    assert _closed(header)
    header, stray = device_header(1, [torch.zeros(4)]), os.memfd_create("not-device-memory")
    given = [header, stray]
    with pytest.raises(wire.WireError, match="device memory"):  # on the CPU: never mapped
        Revealed.read(given, 2**20)
    assert given == [] and _closed(header) and _closed(stray)
