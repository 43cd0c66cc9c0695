"""What a call's commitment costs a rank, and what re-hashing revealed bytes costs the parent,
for each scheme of sandbox/rank/commitment.py, side by side in one process.

    python benchmarks/commitment_cost.py [--device cuda] [--mib 1 16 64 128] [--repeats 10]

Per size: the rank's commitment to one tensor on the device (``transposed``: transposed on the
device, copied to pinned host memory, SHA-256 in threads; ``transposed+sealed``: that and the
sealed memfd copy a rank's done brings; ``tree``: SHA-256 leaves on the device, the top level
copied), and the parent's re-hash of the same bytes on the host (for the sealed copy: its
comparison with the bytes shown); ``+sealed, allocated ahead``: the copy written into a memfd
allocated between calls, as a rank server does after each reply (commitment.allocate_ahead). With
``--leaf-kib`` several leaf sizes of the tree are compared (the module's constant is the one the
judge uses). On a GPU it first checks that the device tree digest equals the host's.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from paths import ROOT  # noqa: F401 - puts the repository on sys.path
from table import SPREAD_HEADER, print_table, spread


def _timed_ms(torch, fn, repeats: int, cuda: bool, before=None) -> list[float]:
    times = []
    for _ in range(repeats):
        if before is not None:
            before()
        if cuda:
            torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        if cuda:
            torch.cuda.synchronize()
        times.append((time.perf_counter() - start) * 1000.0)
    return times


def _no_spare(commitment) -> None:
    """No memfd allocated ahead: the next sealed copy is made in a new one."""
    if commitment._spare is not None:
        os.close(commitment._spare[0])
        commitment._spare = None


def _sealed_copy(commitment, tensor) -> int:
    nonce = b"kloop-benchmark!"
    commitment.stream_digest([tensor], nonce, seal=True)
    return commitment.take_sealed(nonce)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"], help="where the rank's tensor lives")
    parser.add_argument("--mib", type=float, nargs="+", default=[1, 16, 64, 128], help="tensor sizes in MiB")
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--leaf-kib", type=float, nargs="+", default=None,
                        help="tree leaf sizes to compare (default: the judge's own)")
    args = parser.parse_args(argv)
    import torch

    from sandbox.rank import commitment

    cuda = args.device == "cuda"
    if cuda and not torch.cuda.is_available():
        print("no CUDA device: run with --device cpu", file=sys.stderr)
        return 2
    default_leaf = commitment.TREE_LEAF_BYTES
    leaves = [int(k * 1024) for k in args.leaf_kib] if args.leaf_kib else [default_leaf]
    rows = []
    for mib in args.mib:
        tensor = torch.randint(0, 256, (int(mib * 2**20),), dtype=torch.uint8, device=args.device)
        host = tensor.cpu()
        rank = _timed_ms(torch, lambda: commitment.stream_digest([tensor]), args.repeats, cuda)
        parent = _timed_ms(torch, lambda: commitment.stream_digest([host]), args.repeats, False)
        rows.append([f"{mib:g} MiB", "transposed", "-", *spread(rank)[:3], spread(parent)[0]])
        for scheme, before in (("transposed+sealed", _no_spare), ("+sealed, allocated ahead", lambda c: c.allocate_ahead())):
            copies: list[int] = []
            rank = _timed_ms(torch, lambda: copies.append(_sealed_copy(commitment, tensor)), args.repeats, cuda,
                             lambda before=before: before(commitment))
            parent = _timed_ms(torch, lambda: commitment.matches_sealed(copies[-1], [host]) or sys.exit("MISMATCH: sealed copy"),
                               args.repeats, False)
            for fd in copies:
                os.close(fd)
            rows.append([f"{mib:g} MiB", scheme, "-", *spread(rank)[:3], spread(parent)[0]])
        for leaf in leaves:
            commitment.TREE_LEAF_BYTES = leaf
            try:
                if cuda and commitment.tree_digest(tensor) != commitment.tree_digest(host):
                    print(f"MISMATCH: the device tree digest of {mib} MiB differs from the host's", flush=True)
                    return 1
                rank = _timed_ms(torch, lambda: commitment.tree_digest(tensor), args.repeats, cuda)
                parent = _timed_ms(torch, lambda: commitment.tree_digest(host), args.repeats, False)
            finally:
                commitment.TREE_LEAF_BYTES = default_leaf
            rows.append([f"{mib:g} MiB", "tree", f"{leaf / 1024:g}", *spread(rank)[:3], spread(parent)[0]])
        print(f"measured {mib:g} MiB", flush=True)
    header = ["size", "scheme", "leaf_kib", *(f"rank_{h}" for h in SPREAD_HEADER[:3]), "parent_median_ms"]
    print_table(f"commitment cost ({args.device}, {args.repeats} repeats, one tensor)", header, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
