"""Device memory handed from one process to another as a file descriptor (CUDA's virtual memory
management API: ``cuMemCreate`` with a POSIX file descriptor as its shareable handle).

The reference's ranks make a call's inputs on the GPU; written to a memfd, read back by every
rank that stages them, 64 MB a call cost an H200 evaluation about 5 of its 12 s warm (fresh host
pages fault in at about 2 GB/s on that host's VM). Handed over as device memory instead, staging
is a copy from device to device. The descriptor names an allocation that holds nothing but the
call's tensor bytes (the header travels in its own sealed memfd, checked as ever); whoever holds
it can map it read-write, so an exporter hands each allocation to one group of one call and never
reads it again (sandbox/harness/reference_rank.py keeps its own copy to time itself on).

This module is imported by rank processes: the standard library and torch only (ctypes to the
driver's libcuda, which every CUDA process has loaded).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
from collections.abc import Iterator

_POSIX_FD = 0x1  # CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
_PINNED = 0x1  # CU_MEM_ALLOCATION_TYPE_PINNED
_ON_DEVICE = 0x1  # CU_MEM_LOCATION_TYPE_DEVICE
_READ_WRITE = 0x3  # CU_MEM_ACCESS_FLAGS_PROT_READWRITE
_GRANULARITY_MINIMUM = 0x0


class DeviceShareError(Exception):
    """The driver refused (no VMM support, a descriptor that is not an allocation, too small)."""


class _Location(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class _AllocFlags(ctypes.Structure):
    _fields_ = [("compressionType", ctypes.c_ubyte), ("gpuDirectRDMACapable", ctypes.c_ubyte), ("usage", ctypes.c_ushort),
                ("reserved", ctypes.c_ubyte * 4)]


class _AllocationProp(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("requestedHandleTypes", ctypes.c_int), ("location", _Location),
                ("win32HandleMetaData", ctypes.c_void_p), ("allocFlags", _AllocFlags)]


class _AccessDesc(ctypes.Structure):
    _fields_ = [("location", _Location), ("flags", ctypes.c_int)]


_driver: ctypes.CDLL | None = None


def _cuda() -> ctypes.CDLL:
    global _driver
    if _driver is None:
        try:
            _driver = ctypes.CDLL("libcuda.so.1")
        except OSError as error:
            raise DeviceShareError(f"no CUDA driver: {error}") from None
    return _driver


def _check(result: int, what: str) -> None:
    if result != 0:
        name = ctypes.c_char_p()
        _cuda().cuGetErrorName(result, ctypes.byref(name))
        raise DeviceShareError(f"{what} failed: {(name.value or b'?').decode()} ({result})")


def _prop(device: int) -> _AllocationProp:
    prop = _AllocationProp()
    prop.type = _PINNED
    prop.requestedHandleTypes = _POSIX_FD
    prop.location = _Location(_ON_DEVICE, device)
    return prop


def padded(nbytes: int, device: int) -> int:
    """``nbytes`` rounded up to the allocation granularity of ``device`` (at least one granule)."""
    granularity = ctypes.c_size_t()
    _check(_cuda().cuMemGetAllocationGranularity(ctypes.byref(granularity), ctypes.byref(_prop(device)), _GRANULARITY_MINIMUM),
           "cuMemGetAllocationGranularity")
    step = granularity.value
    return max(step, -(-nbytes // step) * step)


class _Mapping:
    """``handle`` mapped read-write into this process at ``address`` on ``device``."""

    def __init__(self, handle: int, size: int, device: int):
        cuda = _cuda()
        self.size = size
        address = ctypes.c_uint64()
        _check(cuda.cuMemAddressReserve(ctypes.byref(address), ctypes.c_size_t(size), ctypes.c_size_t(0), ctypes.c_uint64(0),
                                        ctypes.c_uint64(0)), "cuMemAddressReserve")
        self.address = address.value
        try:
            _check(cuda.cuMemMap(ctypes.c_uint64(self.address), ctypes.c_size_t(size), ctypes.c_size_t(0), ctypes.c_uint64(handle),
                                 ctypes.c_uint64(0)), "cuMemMap")
            try:
                access = _AccessDesc(_Location(_ON_DEVICE, device), _READ_WRITE)
                _check(cuda.cuMemSetAccess(ctypes.c_uint64(self.address), ctypes.c_size_t(size), ctypes.byref(access),
                                           ctypes.c_size_t(1)), "cuMemSetAccess")
            except BaseException:
                cuda.cuMemUnmap(ctypes.c_uint64(self.address), ctypes.c_size_t(size))
                raise
        except BaseException:
            cuda.cuMemAddressFree(ctypes.c_uint64(self.address), ctypes.c_size_t(size))
            raise

    def bytes(self, torch, device: int):
        """The mapping as a uint8 tensor on ``device`` (a view: valid until :meth:`close`)."""

        class _Interface:
            __cuda_array_interface__ = {"shape": (self.size,), "typestr": "|u1", "data": (self.address, False), "version": 3,
                                        "strides": None, "stream": None}

        return torch.as_tensor(_Interface(), device=torch.device("cuda", device))

    def close(self) -> None:
        cuda = _cuda()
        cuda.cuMemUnmap(ctypes.c_uint64(self.address), ctypes.c_size_t(self.size))
        cuda.cuMemAddressFree(ctypes.c_uint64(self.address), ctypes.c_size_t(self.size))


def export(torch, chunks: list[tuple[int, object]], nbytes: int, device: int) -> int:
    """A new allocation of ``nbytes`` (padded) on ``device`` holding each ``(offset, tensor)`` of
    ``chunks`` (contiguous uint8 views on that device) at its offset and zeros elsewhere (the
    driver need not clear what this process freed before: an importer maps the padding too), as
    a descriptor the caller owns: the allocation lives as long as some descriptor of it, or a
    mapping, does."""
    cuda = _cuda()
    size = padded(nbytes, device)
    handle = ctypes.c_uint64()
    _check(cuda.cuMemCreate(ctypes.byref(handle), ctypes.c_size_t(size), ctypes.byref(_prop(device)), ctypes.c_uint64(0)),
           "cuMemCreate")
    try:
        mapping = _Mapping(handle.value, size, device)
        try:
            target = mapping.bytes(torch, device)
            target.zero_()
            for offset, chunk in chunks:
                target[offset:offset + chunk.numel()].copy_(chunk)
        finally:
            torch.cuda.synchronize(device)  # nothing may still be writing the range when it is unmapped
            mapping.close()
        fd = ctypes.c_int(-1)
        _check(cuda.cuMemExportToShareableHandle(ctypes.byref(fd), ctypes.c_uint64(handle.value), _POSIX_FD, ctypes.c_uint64(0)),
               "cuMemExportToShareableHandle")
        return fd.value
    finally:
        cuda.cuMemRelease(ctypes.c_uint64(handle.value))


@contextlib.contextmanager
def imported(torch, fd: int, nbytes: int, device: int) -> Iterator[object]:
    """The allocation behind ``fd`` mapped here for the block, as a uint8 tensor of its first
    ``nbytes`` on ``device``; DeviceShareError when ``fd`` is no such allocation or is smaller."""
    cuda = _cuda()
    handle = ctypes.c_uint64()
    _check(cuda.cuMemImportFromShareableHandle(ctypes.byref(handle), ctypes.c_void_p(fd), _POSIX_FD),
           "cuMemImportFromShareableHandle")
    try:
        size = padded(nbytes, device)
        mapping = _Mapping(handle.value, size, device)  # the driver refuses a range larger than the allocation
        try:
            yield mapping.bytes(torch, device)[:nbytes]
        finally:
            torch.cuda.synchronize(device)  # what the block enqueued is done with the range before it is unmapped
            mapping.close()
    finally:
        cuda.cuMemRelease(ctypes.c_uint64(handle.value))


def close(fd: int) -> None:
    with contextlib.suppress(OSError):
        os.close(fd)
