"""The host side of a blob: a fresh memfd's pages faulted in through a MAP_POPULATE'd mapping (how
blobs were written until 2026-12-03), with huge-page advice, written with pwrite, faulted in by
several threads at once (MADV_POPULATE_WRITE on a share of the mapping each: page faults of one
file in parallel, where a pwrite holds the file's lock), and the same once the pages exist;
anonymous memory and a plain copy for scale. On the H200 host (a VM) a fresh page costs far more
than a copy of it.

    python benchmarks/blob_memory.py [--mib 64] [--repeats 8] [--threads 2 4 8]
"""

from __future__ import annotations

import argparse
import ctypes
import mmap
import os
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor

from paths import ROOT  # noqa: F401 - puts the repository on sys.path
from table import print_table

MADV_HUGEPAGE, MADV_POPULATE_WRITE = 14, 23


def _kernel_settings() -> str:
    found = []
    for path in ("/sys/kernel/mm/transparent_hugepage/enabled", "/sys/kernel/mm/transparent_hugepage/shmem_enabled"):
        try:
            with open(path) as setting:
                found.append(f"{path.rsplit('/', 1)[-1]}: {setting.read().strip()}")
        except OSError:
            pass
    return f"kernel {os.uname().release}, {os.cpu_count()} CPUs; " + "; ".join(found)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mib", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=8)
    parser.add_argument("--threads", type=int, nargs="+", default=[2, 4, 8])
    args = parser.parse_args(argv)
    size = args.mib * 2**20
    libc = ctypes.CDLL(None, use_errno=True)
    payload = bytes(size)

    def fresh_populated():
        fd = os.memfd_create("probe")
        os.ftruncate(fd, size)
        mmap.mmap(fd, size, flags=mmap.MAP_SHARED | mmap.MAP_POPULATE).close()
        os.close(fd)

    def fresh_huge_advice():
        fd = os.memfd_create("probe")
        os.ftruncate(fd, size)
        region = mmap.mmap(fd, size, flags=mmap.MAP_SHARED)
        address = ctypes.c_void_p(ctypes.addressof(ctypes.c_char.from_buffer(region)))
        libc.madvise(address, ctypes.c_size_t(size), MADV_HUGEPAGE)
        libc.madvise(address, ctypes.c_size_t(size), MADV_POPULATE_WRITE)
        del address
        region.close()
        os.close(fd)

    def fresh_pwrite():
        fd = os.memfd_create("probe")
        os.pwrite(fd, payload, 0)
        os.close(fd)

    def fresh_parallel(threads: int, pool: ThreadPoolExecutor):
        def populate():
            fd = os.memfd_create("probe")
            os.ftruncate(fd, size)
            region = mmap.mmap(fd, size, flags=mmap.MAP_SHARED)
            base = ctypes.addressof(ctypes.c_char.from_buffer(region))
            share = -(-size // threads // mmap.PAGESIZE) * mmap.PAGESIZE
            spans = [(start, min(share, size - start)) for start in range(0, size, share)]
            results = list(pool.map(lambda span: libc.madvise(ctypes.c_void_p(base + span[0]), ctypes.c_size_t(span[1]),
                                                              MADV_POPULATE_WRITE), spans))  # ctypes lets go of the GIL
            if any(results):
                raise OSError(ctypes.get_errno(), "madvise(MADV_POPULATE_WRITE) failed")
            region.close()
            os.close(fd)
        return populate

    kept = os.memfd_create("kept")
    os.pwrite(kept, payload, 0)
    target = bytearray(size)
    cases = [
        ("fresh memfd, MAP_POPULATE'd mapping", fresh_populated),
        ("fresh memfd, huge-page advice + MADV_POPULATE_WRITE", fresh_huge_advice),
        ("fresh memfd, pwrite", fresh_pwrite),
        *((f"fresh memfd, {n} threads MADV_POPULATE_WRITE", fresh_parallel(n, ThreadPoolExecutor(n))) for n in args.threads),
        ("memfd with its pages, pwrite", lambda: os.pwrite(kept, payload, 0)),
        ("memfd with its pages, MAP_POPULATE'd mapping", lambda: mmap.mmap(kept, size, flags=mmap.MAP_SHARED | mmap.MAP_POPULATE).close()),
        ("anonymous memory, MAP_POPULATE", lambda: mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | mmap.MAP_POPULATE).close()),
        ("a copy between two buffers", lambda: target.__setitem__(slice(None), payload)),
    ]
    rows = []
    for name, case in cases:
        times = []
        for _ in range(args.repeats):
            started = time.perf_counter()
            case()
            times.append((time.perf_counter() - started) * 1000)
        median = statistics.median(times)
        rows.append([name, round(median, 2), round(min(times), 2), round(size / 2**30 / (median / 1000), 2)])
    os.close(kept)
    print_table(f"a blob's host memory, {args.mib} MiB ({_kernel_settings()})", ["case", "median_ms", "min_ms", "GiB_per_s"], rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
