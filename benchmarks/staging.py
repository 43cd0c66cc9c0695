"""How long a rank takes to stage one call's inputs (a sealed blob made into tensors on its
device), by how the blob's pages are mapped. The parent's clock check compares the two groups'
staging time, so its spread is what work hidden in staging must exceed to be seen.

    python benchmarks/staging.py [--mib 128] [--repeats 12] [--device cuda]

Variants, interleaved, each on a fresh blob (as every timed round is):
  faulted     pageable, mapped lazily: the copy takes a page fault per 4 KiB page
  populated   pageable, the mapping filled in one call (MAP_POPULATE)
  wire.Blob   what a rank does (sandbox/rank/wire.py): populated, and page-locked for a copy to a CUDA
              device (cudaHostRegister, read-only); on the CPU the same as populated
"""

from __future__ import annotations

import argparse
import mmap
import os
import sys
import time
import warnings

from paths import ROOT  # noqa: F401 - puts the repository on sys.path
from table import SPREAD_HEADER, print_table, spread

from sandbox.rank import wire

MAX_BYTES = 2**40


def _pageable(fd: int, device: str, populate: bool):
    import torch

    with wire.Blob(fd, MAX_BYTES) as blob:  # header checks as the rank does them; the data mapped again
        spec, start = blob.specs[0], blob.data_start
    flags = mmap.MAP_SHARED | (mmap.MAP_POPULATE if populate else 0)
    with mmap.mmap(fd, start + spec["nbytes"], flags=flags, prot=mmap.PROT_READ) as region:
        view = torch.frombuffer(region, dtype=torch.uint8, count=spec["nbytes"], offset=start)
        out = view.to(device, copy=True)
        del view
    return out


def _blob(fd: int, device: str):
    with wire.Blob(fd, MAX_BYTES) as blob:
        return blob.tensors(device)[0]


VARIANTS = {"faulted": lambda fd, device: _pageable(fd, device, False), "populated": lambda fd, device: _pageable(fd, device, True),
            "wire.Blob": _blob}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mib", type=int, default=128, help="one call's inputs, MiB (all_reduce's default size: 128)")
    parser.add_argument("--repeats", type=int, default=12)
    parser.add_argument("--device", default=None, help="cuda when a GPU is there, else cpu")
    args = parser.parse_args(argv)
    import torch

    warnings.filterwarnings("ignore", message="The given buffer is not writable")  # read-only maps, copied at once

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda") and not torch.cuda.is_available():
        parser.error("--device cuda: no GPU here")
    source = torch.randint(0, 255, (args.mib * 2**20,), dtype=torch.uint8)
    times: dict[str, list[float]] = {name: [] for name in VARIANTS}
    for _ in range(args.repeats):
        for name, stage in VARIANTS.items():
            fd = wire.write_blob({"T": 0}, [source])
            try:
                started = time.perf_counter()
                out = stage(fd, device)
                if device.startswith("cuda"):
                    torch.cuda.synchronize()
                times[name].append((time.perf_counter() - started) * 1000.0)
                assert out.numel() == source.numel()
                del out
            finally:
                os.close(fd)
    rows = []
    for name, values in times.items():
        row = spread(values)
        rows.append([name, *row, args.mib * 2**20 / row[0] / 1e6])
    print_table(f"staging one call's inputs: {args.mib} MiB to {device}, {args.repeats} fresh blobs each, interleaved",
                ["variant", *SPREAD_HEADER, "GB_per_s"], rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
