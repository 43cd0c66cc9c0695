"""Kernel parameter packing (no GPU needed): each value lands in its 8-byte slot as the bytes
the kernel's parameter of that size expects."""

import ctypes
import struct

import pytest
import torch

from kloop_runtime.driver import CudaKernel


@pytest.fixture
def kernel():
    k = object.__new__(CudaKernel)
    k.name = "k"
    return k


def low_bytes(slot: int, size: int) -> bytes:
    return slot.to_bytes(8, "little")[:size]


def test_ints_floats_and_bools(kernel):
    assert low_bytes(kernel._slot(0, -3, 4, torch), 4) == struct.pack("<i", -3)
    assert low_bytes(kernel._slot(0, 2**32 - 1, 4, torch), 4) == struct.pack("<I", 2**32 - 1)
    assert low_bytes(kernel._slot(0, -(2**40), 8, torch), 8) == struct.pack("<q", -(2**40))
    assert low_bytes(kernel._slot(0, 1.5, 4, torch), 4) == struct.pack("<f", 1.5)
    assert low_bytes(kernel._slot(0, -2.25, 8, torch), 8) == struct.pack("<d", -2.25)
    assert kernel._slot(0, True, 1, torch) == 1
    assert low_bytes(kernel._slot(0, ctypes.c_uint16(513), 2, torch), 2) == struct.pack("<H", 513)


def test_mistakes_name_the_argument(kernel):
    with pytest.raises(TypeError, match="argument 2 of kernel k: tensor is on cpu"):
        kernel._slot(2, torch.zeros(1), 8, torch)
    with pytest.raises(TypeError, match="does not fit in 4 bytes"):
        kernel._slot(0, 2**33, 4, torch)
    with pytest.raises(TypeError, match="cannot pass str"):
        kernel._slot(0, "x", 8, torch)
    with pytest.raises(TypeError, match="is 4 bytes, the kernel takes 8"):
        kernel._slot(0, ctypes.c_int32(1), 8, torch)
