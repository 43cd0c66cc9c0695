"""Blobs staged to a GPU (marker gpu): page-locked for the copy, and a copy from pageable memory
where the driver refuses to lock them, with nothing left behind for torch to trip on."""

import os

import pytest

from sandbox.rank import wire

pytestmark = pytest.mark.gpu


@pytest.fixture
def blob_fd():
    import torch

    tensors = [torch.arange(3 * 2**20, dtype=torch.float32), torch.tensor([7], dtype=torch.int64), torch.empty(0)]
    fd = wire.write_blob([{"T": 0}, {"T": 1}, {"T": 2}], tensors)
    yield fd, tensors
    os.close(fd)


def test_a_blob_staged_page_locked_arrives_whole(blob_fd):
    import torch

    fd, tensors = blob_fd
    with wire.Blob(fd, 2**30) as blob:
        staged = blob.tensors("cuda")
    for sent, arrived in zip(tensors, staged):
        assert arrived.device.type == "cuda" and torch.equal(arrived.cpu(), sent)


def test_a_blob_the_driver_will_not_lock_is_copied_from_pageable_memory(blob_fd):
    """Locked already (cudaErrorHostMemoryAlreadyRegistered): the copy goes on, and the failed
    call's error is cleared before torch's next kernel launch checks for one."""
    import torch

    fd, tensors = blob_fd
    cudart = torch.cuda.cudart()
    with wire.Blob(fd, 2**30) as blob:
        pointer = torch.frombuffer(blob.map, dtype=torch.uint8, count=1).data_ptr()
        assert int(cudart.cudaHostRegister(pointer, blob.size, wire.CUDA_HOST_REGISTER_READ_ONLY)) == 0
        try:
            staged = blob.tensors("cuda")
            launched = torch.ones(4, device="cuda") * 2  # raised "CUDA error" when the error was left set
            torch.cuda.synchronize()
        finally:
            cudart.cudaHostUnregister(pointer)
    assert torch.equal(staged[0].cpu(), tensors[0]) and launched.sum().item() == 8


def test_a_blob_written_from_the_device_holds_its_bytes():
    """Written page-locked from CUDA tensors (a non-contiguous one and an empty one among them),
    then read back on the CPU: the bytes, dtypes and shapes of what was sent."""
    import time

    import torch

    big = torch.randn(32 * 2**20, device="cuda").to(torch.bfloat16)
    tensors = [big, torch.arange(12, device="cuda", dtype=torch.int32).reshape(3, 4).t(), torch.empty(0, device="cuda")]
    started = time.perf_counter()
    fd = wire.write_blob([{"T": 0}, {"T": 1}, {"T": 2}], tensors)
    written_ms = (time.perf_counter() - started) * 1000
    try:
        with wire.Blob(fd, 2**30) as blob:
            back = blob.tensors()
    finally:
        os.close(fd)
    for sent, arrived in zip(tensors, back):
        assert arrived.device.type == "cpu" and arrived.dtype == sent.dtype and arrived.shape == sent.shape
        assert torch.equal(arrived.view(torch.uint8) if arrived.dtype == torch.bfloat16 else arrived,
                           sent.cpu().view(torch.uint8) if sent.dtype == torch.bfloat16 else sent.cpu())
    print(f"a 64 MiB bf16 tensor written from the device into a blob in {written_ms:.1f} ms")


def test_a_device_blob_arrives_whole_and_what_is_lent_is_not_what_is_kept():
    """A device blob staged from either allocation arrives whole; writing every byte of the lent
    one (a candidate's rank may) leaves the kept one, the reference's, as made."""
    import torch

    from sandbox.rank import device_share

    tensors = [torch.randn(3 * 2**20, device="cuda").to(torch.bfloat16), torch.tensor([7], dtype=torch.int64, device="cuda"),
               torch.empty(0, device="cuda")]
    header, lent, kept = wire.write_device_blob([{"T": 0}, {"T": 1}, {"T": 2}], tensors, 0, copies=2)
    try:
        with wire.Blob(header, 2**30) as blob:
            for fd in (lent, kept):
                staged = blob.tensors("cuda", fd)
                assert all(torch.equal(a, b) and a.dtype == b.dtype for a, b in zip(staged, tensors))
            with device_share.imported(torch, lent, blob.device_bytes, 0) as raw:
                raw.fill_(0xFF)
            assert torch.isnan(blob.tensors("cuda", lent)[0]).all()
            assert all(torch.equal(a, b) for a, b in zip(blob.tensors("cuda", kept), tensors))
    finally:
        for fd in (header, lent, kept):
            os.close(fd)


def test_device_memory_lent_holds_nothing_this_process_freed_before():
    """The padding of an allocation (an importer maps it whole) is zeros, not whatever the
    reference's process freed there before (its expected outputs, say)."""
    import torch

    from sandbox.rank import device_share

    secret = torch.full((512 * 2**20,), 0x5A, dtype=torch.uint8, device="cuda")
    del secret
    torch.cuda.empty_cache()  # back to the driver, for cuMemCreate to hand out again
    small = torch.arange(1000, device="cuda", dtype=torch.int64).to(torch.uint8)
    fd = device_share.export(torch, [(0, small)], small.numel(), 0)
    try:
        whole = device_share.padded(small.numel(), 0)
        with device_share.imported(torch, fd, whole, 0) as raw:
            assert torch.equal(raw[:1000], small) and int(raw[1000:].count_nonzero()) == 0
    finally:
        os.close(fd)


def test_a_device_blob_is_read_back_whole_and_its_descriptors_are_taken():
    """A revealed call or an expectation as device memory (one allocation): read straight onto the
    device; the header and the allocation are both taken off the list and closed."""
    import torch

    tensors = [torch.randn(2**20, device="cuda"), torch.arange(5, device="cuda")]
    given = list(wire.write_device_blob(1, tensors, 0))
    held = list(given)
    tree, read = wire.read_blob(given, 2**30, torch.device("cuda", 0))
    assert tree == 1 and given == [] and all(torch.equal(a, b) for a, b in zip(read, tensors))
    for fd in held:
        with pytest.raises(OSError):
            os.fstat(fd)
