"""The device tree digest (marker gpu): the leaf kernel built with NVRTC gives, for a CUDA tensor,
the digest the parent computes on the host from the same bytes, whatever the dtype, size,
alignment or layout; and it costs a fraction of the transposed scheme's host hashing."""

import time

import pytest

from sandbox.rank import commitment

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("size", [0, 3, 8191, 8192, 8193, 8192 * 8192 + 1, 64 * 2**20 + 12])
def test_the_device_tree_digest_is_the_hosts(size):
    import torch

    raw = torch.randint(0, 256, (size + 3,), dtype=torch.uint8, device="cuda")
    for tensor in (raw[:size], raw[3:]):  # aligned, and at an offset the kernel cannot read words from
        assert commitment.tree_digest(tensor) == commitment.tree_digest(tensor.cpu())


def test_dtypes_and_layouts_commit_as_their_host_copies():
    import torch

    tensors = [torch.randn(257, 129, dtype=torch.bfloat16, device="cuda").t(),  # not contiguous
               torch.randn(1000, dtype=torch.float32, device="cuda"), torch.tensor(True, device="cuda"),
               torch.arange(10**6, dtype=torch.int64, device="cuda")]
    assert commitment.commitment(tensors, "tree") == commitment.commitment([t.cpu() for t in tensors], "tree")
    changed = tensors[3].clone()
    changed[123456] += 1
    assert commitment.commitment([*tensors[:3], changed], "tree") != commitment.commitment(tensors, "tree")


def test_a_device_commitment_costs_far_less_than_the_transposed_one():
    """128 MiB (a 64 MB call's outputs and inputs): the tree on the device against the transposed
    scheme (copy to the host, SHA-256 in threads), medians of five; printed for the note."""
    import torch

    tensor = torch.randint(0, 256, (128 * 2**20,), dtype=torch.uint8, device="cuda")
    commitment.tree_digest(tensor)

    def median_ms(fn) -> float:
        times = []
        for _ in range(5):
            torch.cuda.synchronize()
            start = time.perf_counter()
            fn()
            times.append((time.perf_counter() - start) * 1000)
        return sorted(times)[2]

    tree, transposed = median_ms(lambda: commitment.tree_digest(tensor)), median_ms(lambda: commitment.stream_digest([tensor]))
    print(f"commitment of 128 MiB on the device: tree {tree:.3f} ms, transposed {transposed:.3f} ms")
    assert tree * 5 < transposed
