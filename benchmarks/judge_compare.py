"""The parent's judging of one output: the full check alone against the quick pass the judge tries
first (sandbox/harness/compare.py), side by side on the same tensors, in one run.

    python benchmarks/judge_compare.py                 # 32M bf16 elements (the all-reduce default size)
    python benchmarks/judge_compare.py --elements 4194304 --repeats 5
"""

from __future__ import annotations

import argparse
import statistics
import time

from table import print_table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--elements", type=int, default=32 * 2**20)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)

    import torch

    import sandbox.harness.compare as compare

    expected = torch.randn(args.elements, generator=torch.Generator().manual_seed(0))
    got = expected.bfloat16()
    quick = compare._within_bounds

    def timed(use_quick: bool) -> float:
        compare._within_bounds = quick if use_quick else (lambda *_: False)
        try:
            started = time.perf_counter()
            assert compare.compare_tensor(expected, (args.elements,), "bfloat16", 0.01, 0.005, got, 1e-2, 1e-2) is None
            return time.perf_counter() - started
        finally:
            compare._within_bounds = quick

    times = {name: [] for name in ("full check", "quick pass")}
    for _ in range(args.repeats):  # interleaved: a busy host moves both alike
        times["full check"].append(timed(False))
        times["quick pass"].append(timed(True))
    base = statistics.median(times["full check"])
    rows = [[name, round(statistics.median(t), 3), round(min(t), 3), round(base / statistics.median(t), 2)] for name, t in times.items()]
    print_table(f"judging one correct output of {args.elements} bf16 elements, {torch.get_num_threads()} threads, "
                f"{args.repeats} repeats", ["path", "median_s", "min_s", "speedup"], rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
