"""Distributed sample sort with a balanced result: every rank ends with its n-element slice of the sorted keys.

Pattern from distributed sorting in data systems and simulations: sample sort / PSRS (parallel
sorting by regular sampling), as in the sort of distributed data frames (Dask and Dask-cuDF's
``sort_values`` pick partition boundaries from sampled quantiles, then shuffle) and in particle
codes that re-sort particles by cell key every few steps. Each rank sorts its n keys, picks W-1 regular samples, all-gathers the samples and
chooses W-1 splitters from them; it cuts its sorted keys at the splitters, the ranks exchange
bucket sizes and then the buckets with an uneven all-to-all, and each rank merges the W sorted
runs it received. Buckets are uneven (the keys are skewed and have duplicates), so a final
rebalancing all-to-all, computed from the all-gathered bucket sizes, leaves rank r with exactly
elements r*n..(r+1)*n-1 of the globally sorted sequence, which is what is compared (bit-exact,
independent of how a solution partitions the keys: a radix-based exchange or a different
splitter choice is fine). The keys are fp32 (float keys sort by value; the harness's upcast run in
fp64 sorts identically, so the judge is exact).
"""

from problems.authoring import rank_generator

from problems.contract import Cost, ProblemSpec

SPEC = ProblemSpec(
    name="distributed_sample_sort",
    category="domain",
    pattern="local sort, all-gather of samples, uneven all-to-all of buckets, merge, rebalancing all-to-all",
    origin="sample sort / PSRS: Dask and Dask-cuDF sort_values (sampled quantile boundaries, then a shuffle); particle re-sorting",
    dtype="float32",
    atol=0.0,
    rtol=0.0,
    shapes={"default": {"n": 16 * 2**20}, "small": {"n": 256}},
    description="Each rank holds n float keys (no NaN). Every rank returns its slice of the sorted concatenation of all ranks' "
                "keys: rank r returns sorted(all keys)[r*n:(r+1)*n], shape [n].",
)


def make_inputs(rank, world, generator, device, dtype, *, n):
    import torch

    own = rank_generator(generator, rank)
    # skewed, rank-dependent keys with many duplicates: log-normal magnitudes, rounded to 1/64
    shift = torch.rand((), generator=own, device=device) * 2
    keys = torch.exp(torch.randn(n, generator=own, device=device) + shift) * torch.sign(torch.randn(n, generator=own, device=device) + 1)
    return ((keys * 64).round() / 64).to(dtype),


def cost(world, dtype_bytes, *, n):
    import math

    keys = n * dtype_bytes
    # keys leave their rank about twice (bucket exchange, rebalancing), (W-1)/W of them each time
    return Cost(comm_bytes=2 * (world - 1) / world * keys, flops=2 * n * math.log2(max(n, 2)), hbm_bytes=8 * keys)
