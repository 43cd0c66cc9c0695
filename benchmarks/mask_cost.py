"""What masking a call's inputs costs (sandbox/rank/input_mask.py), side by side in one process with
the torch-generator mask it replaced: on the CPU SHAKE-128 against torch's CPU generator (a Mersenne
Twister seeded from the key), on a GPU the ChaCha20 kernel against torch's CUDA generator.

    python benchmarks/mask_cost.py [--device cpu|cuda] [--kib 48 4096 65536] [--repeats 20]

Per size: the host's time to mask two tensors of that size (on a GPU, also the time until the
device's work ended), medians over the repeats, each with another key.
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import time

from paths import ROOT  # noqa: F401 - puts the repository on sys.path
from table import print_table


def torch_generator_mask(torch, tensors: list, key: int, rank: int) -> None:
    """The mask before 2026-12-07: torch's generator seeded with a 63-bit hash of the key and the rank."""
    generator = torch.Generator(device=tensors[0].device)
    generator.manual_seed(int.from_bytes(hashlib.blake2b(f"{key}/{rank}".encode(), digest_size=8).digest(), "little") >> 1)
    for tensor in tensors:
        head = tensor.view(-1).view(torch.uint8)[: tensor.numel() * tensor.element_size() // 4 * 4].view(torch.int32)
        head.bitwise_xor_(torch.empty_like(head).random_(-2**31, 2**31 - 1, generator=generator))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--kib", type=int, nargs="+", default=[48, 4096, 65536], help="each tensor's size in KiB")
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args(argv)
    if args.repeats < 1 or any(k < 1 for k in args.kib):
        parser.error("--repeats and --kib must be positive")
    import torch

    from sandbox.rank import input_mask

    cuda = args.device == "cuda"
    if cuda and not torch.cuda.is_available():
        parser.error("--device cuda needs a GPU")
    new_name = "chacha20 kernel" if cuda else "shake-128"
    rows = []
    for kib in args.kib:
        tensors = [torch.randn(kib * 256, device=args.device) for _ in range(2)]
        for name, mask in ((new_name, lambda key: input_mask.apply(torch, tensors, key, 0)),
                           ("torch generator", lambda key: torch_generator_mask(torch, tensors, key, 0))):
            mask(0)  # compiled, allocated
            host, total = [], []
            for key in range(1, args.repeats + 1):
                if cuda:
                    torch.cuda.synchronize()
                start = time.perf_counter()
                mask(key)
                host.append((time.perf_counter() - start) * 1000)
                if cuda:
                    torch.cuda.synchronize()
                total.append((time.perf_counter() - start) * 1000)
            rows.append([kib, name, statistics.median(host), statistics.median(total) if cuda else None])
    print_table(f"masking two tensors ({args.device}, medians of {args.repeats})", ["kib_each", "mask", "host_ms", "to_device_end_ms"], rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
