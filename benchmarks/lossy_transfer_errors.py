"""How far a lossy all-reduce (each rank's tensor sent as block-scaled int8) is from honest bf16
ones, in the terms the judge's value bound uses (sandbox/harness/compare.py): RMS error against the
exact sum, as a multiple of the native reference's own, overall and by the result's magnitude.

Honest sums of W bf16 tensors: in a ring (rounded to bf16 after each addition, as NCCL's and
gloo's ring steps do), as a pairwise tree, or accumulated in fp32 and rounded once. The native
reference is either of the first and the last (which one depends on the backend and algorithm).
The lossy one adds the other ranks' int8-quantized tensors (one fp32 scale per block) to its own.

A second table counts the elements beyond what the judge allows any element of a sum of products
(ProblemSpec.sum_of_products: twice honest rounding's bound, atol + 2 (W + 1) u times the sum of the
terms' magnitudes), in all_reduce's two input regimes (plain, and three quarters of the values 256
times smaller): no honest sum may have any.

    python benchmarks/lossy_transfer_errors.py --worlds 2 4 8 --block 32 64
"""

from __future__ import annotations

import argparse
import sys

from paths import ROOT  # noqa: F401 - puts the repository on sys.path
import torch
from table import print_table

from problems.authoring import mixed_magnitudes


def _ring(xs: list[torch.Tensor]) -> torch.Tensor:
    total = xs[0]
    for x in xs[1:]:
        total = (total.float() + x.float()).bfloat16()
    return total.double()


def _tree(xs: list[torch.Tensor]) -> torch.Tensor:
    level = list(xs)
    while len(level) > 1:
        level = [(level[i].float() + level[i + 1].float()).bfloat16() if i + 1 < len(level) else level[i]
                 for i in range(0, len(level), 2)]
    return level[0].double()


def _fp32(xs: list[torch.Tensor]) -> torch.Tensor:
    return sum(x.float() for x in xs).bfloat16().double()


def _int8(xs: list[torch.Tensor], block: int) -> torch.Tensor:
    def dequantized(x: torch.Tensor) -> torch.Tensor:
        blocks = x.float().reshape(-1, block)
        scale = blocks.abs().amax(dim=1, keepdim=True).clamp_min(1e-30) / 127.0
        return (torch.round(blocks / scale).clamp(-127, 127) * scale).reshape(-1)

    return (xs[0].float() + sum(dequantized(x) for x in xs[1:])).bfloat16().double()


def _rms(values: torch.Tensor) -> float:
    return float(values.square().mean().sqrt())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--worlds", type=int, nargs="+", default=[2, 4, 8])
    parser.add_argument("--block", type=int, nargs="+", default=[32], help="elements per int8 scale")
    parser.add_argument("--numel", type=int, default=1 << 20)
    parser.add_argument("--scale", type=float, default=4.0, help="inputs are randn * scale (all_reduce's own)")
    args = parser.parse_args(argv)
    generator = torch.Generator().manual_seed(0)
    rows = []
    for world in args.worlds:
        xs = [(torch.randn(args.numel, generator=generator) * args.scale).bfloat16() for _ in range(world)]
        exact = sum(x.double() for x in xs)
        magnitude = exact.abs()
        tenth, half = torch.quantile(magnitude[:200_000].float(), torch.tensor([0.1, 0.5])).tolist()
        parts = {"all": torch.ones_like(magnitude, dtype=torch.bool), "|sum| < p10": magnitude < tenth,
                 "p10-p50": (magnitude >= tenth) & (magnitude < half), "> p50": magnitude >= half}
        honest = {"ring": _ring(xs), "tree": _tree(xs), "fp32": _fp32(xs)}
        lossy = {f"int8/{block}": _int8(xs, block) for block in args.block}
        for native_name in ("ring", "fp32"):
            native = honest[native_name]
            for part, mask in parts.items():
                base = _rms((native - exact)[mask])
                ratios = [round(_rms((got - exact)[mask]) / base, 2) for got in (*honest.values(), *lossy.values())]
                floor = round(2**-8 * _rms(exact[mask]) / base, 2) if part == "all" else None
                rows.append([world, native_name, part, *ratios, floor])
    print_table("RMS error as a multiple of the native reference's (the judge allows 2x, plus a floor of rtol x RMS |sum| "
                "shown in the last column for all_reduce's rtol 2**-8)",
                ["world", "native", "elements", "ring", "tree", "fp32", *[f"int8/{b}" for b in args.block], "floor"], rows)
    rows = []
    for world in args.worlds:
        for regime, mixed in (("plain", False), ("mixed", True)):
            xs = [(torch.randn(args.numel, generator=generator) * args.scale).bfloat16() for _ in range(world)]
            xs = [mixed_magnitudes(x, generator) if mixed else x for x in xs]
            exact = sum(x.double() for x in xs)
            bound = 1e-3 + 2 * (world + 1) * 2**-8 * sum(x.double().abs() for x in xs)
            results = [_ring(xs), _tree(xs), _fp32(xs), *(_int8(xs, block) for block in args.block)]
            rows.append([world, regime, *[int(((got - exact).abs() > bound).sum()) for got in results]])
    print_table(f"elements (of {args.numel}) beyond twice honest rounding's bound (sum_of_products; all_reduce's atol and rtol)",
                ["world", "inputs", "ring", "tree", "fp32", *[f"int8/{b}" for b in args.block]], rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
