"""The inputs' mask on a GPU (marker gpu): rank_kernels.cu's ChaCha20 kernel, compiled with NVRTC
and launched on CUDA tensors, masks their bytes as its host build does, in place, and a second
pass removes it. Its host cost beside torch's generator's is printed for the note (a benchmark's
number, not asserted: on an H100 on 2026-12-07 the two were alike, 0.087 and 0.084 ms for two small
tensors)."""

import ctypes
import hashlib
import time

import pytest

from sandbox.rank import input_mask

pytestmark = pytest.mark.gpu


def test_the_device_mask_is_its_host_build_byte_for_byte(rank_kernels_host, monkeypatch):
    import torch

    plain = [torch.randn(4097, device="cuda", dtype=torch.bfloat16), torch.arange(1001, dtype=torch.int8, device="cuda"),
             torch.randn(3, 64 * 1024 + 5, device="cuda"), torch.empty(0, device="cuda"), torch.tensor(2.5, device="cuda")]
    masked = [t.clone() for t in plain]
    input_mask.apply(torch, masked, key=77, rank=3)
    torch.cuda.synchronize()
    on_host = [t.cpu() for t in plain]

    def host_launch(name, threads, args, device):
        tensor, size, *words, stream = args
        rank_kernels_host.kloop_mask_chacha20_host(tensor.data_ptr(), size, (ctypes.c_uint * 8)(*words), stream)

    monkeypatch.setattr(input_mask.device_kernels, "launch", host_launch)
    input_mask._apply_on_device(on_host, 77, 3)
    for device_copy, host_copy, original in zip(masked, on_host, plain):
        assert torch.equal(device_copy.cpu().view(-1).view(torch.uint8), host_copy.view(-1).view(torch.uint8))
        if original.numel():
            assert not torch.equal(device_copy, original)
    monkeypatch.undo()
    input_mask.apply(torch, masked, key=77, rank=3)
    assert all(torch.equal(m, p) for m, p in zip(masked, plain))
    other_rank = input_mask.masked(torch, plain, key=77, rank=4)
    assert not torch.equal(other_rank[0], input_mask.masked(torch, plain, key=77, rank=3)[0])


def test_a_call_s_mask_masks_every_size_and_prints_its_cost():
    """Host time of masking a call's two tensors (small and 64 MiB), medians of 50, against the
    torch-generator mask it replaced; each key's mask removed again by the same pass."""
    import torch

    def torch_generator_mask(tensors, key, rank):
        generator = torch.Generator(device=tensors[0].device)
        generator.manual_seed(int.from_bytes(hashlib.blake2b(f"{key}/{rank}".encode(), digest_size=8).digest(), "little") >> 1)
        for tensor in tensors:
            head = tensor.view(-1).view(torch.uint8)[: tensor.numel() * tensor.element_size() // 4 * 4].view(torch.int32)
            head.bitwise_xor_(torch.empty_like(head).random_(-2**31, 2**31 - 1, generator=generator))

    for numel in (12_288, 32 * 2**20):
        tensors = [torch.randn(numel, device="cuda", dtype=torch.bfloat16) for _ in range(2)]
        plain = [t.clone() for t in tensors]
        input_mask.apply(torch, tensors, 1000, 0)
        for masked_tensor, original in zip(tensors, plain):  # every 64-byte block of every launch's grid masked
            unchanged = (masked_tensor.view(torch.uint8) == original.view(torch.uint8)).float().mean().item()
            assert unchanged < 0.01, f"{unchanged:.1%} of the bytes of a {numel}-element tensor kept their value"
        input_mask.apply(torch, tensors, 1000, 0)
        assert all(torch.equal(t, o) for t, o in zip(tensors, plain))
        rows = []
        for name, mask in (("chacha20 kernel", lambda key: input_mask.apply(torch, tensors, key, 0)),
                           ("torch generator", lambda key: torch_generator_mask(tensors, key, 0))):
            host, total = [], []
            for key in range(50):
                torch.cuda.synchronize()
                start = time.perf_counter()
                mask(key)
                host.append((time.perf_counter() - start) * 1000)
                torch.cuda.synchronize()
                total.append((time.perf_counter() - start) * 1000)
            rows.append((name, sorted(host)[25], sorted(total)[25]))
        for name, host_ms, total_ms in rows:
            print(f"mask of 2 x {numel} bf16 on the device: {name:>16}: host {host_ms:.4f} ms, to the end of its work {total_ms:.4f} ms")
