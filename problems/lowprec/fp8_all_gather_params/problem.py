"""FSDP all-gather of parameters in float8: per-tensor scales from an all-reduced amax, fp8 on the wire.

Pattern from torchtitan's float8 training with FSDP2 (torchao ``enable_fsdp_float8_all_gather``
with ``precompute_float8_dynamic_scale_for_fsdp``): each rank holds a row shard of every weight
of a block; before the forward, the amax of each whole weight is found with one all-reduce (max)
of the shards' amaxes, every rank casts its shard to float8_e4m3fn with the weight's scale
``448 / amax``, and the fp8 bytes of all the block's weights are all-gathered in one bucket (as
FSDP2 does, through a uint8 buffer), half the bytes of a bf16 all-gather. The gathered fp8 weight
and its scale are what the fp8 GEMM consumes; it dequantizes on the fly (the weight it represents
is ``w_fp8 / scale``), so the fp8 codes and the scales are the outputs, not a bf16 copy. Here the
block is an MLP's two weights. Every rank returns the gathered fp8 weights and the two scales. The scale and the cast are specified to the bit (fp32 arithmetic, round to nearest even,
saturation at 448), so the outputs are compared exactly and without an upcast run (an fp32 run
would give the same fp8 bytes, so it would add nothing): a wrong amax (a shard's instead of the
weight's), a different scale formula or a truncating cast changes fp8 values and fails.
"""

from problems.authoring import randn, rank_generator

from problems.contract import Cost, ProblemSpec

SPEC = ProblemSpec(
    name="fp8_all_gather_params",
    category="lowprec",
    pattern="all-reduce (max) of per-shard amax, cast to float8_e4m3fn, bucketed all-gather of the fp8 bytes",
    origin="torchtitan float8 + FSDP2 (torchao enable_fsdp_float8_all_gather, precompute_float8_dynamic_scale_for_fsdp)",
    dtype="bfloat16",
    atol=0.0,
    rtol=0.0,
    upcast=False,
    shapes={"default": {"hidden": 4096, "ffn": 14336}, "small": {"hidden": 32, "ffn": 64}},
    description="Rank r holds row shard r of two weights: w1 ([ffn/world, hidden], rows r*ffn/world.. of W1 [ffn, hidden]) and "
                "w2 ([hidden/world, ffn], of W2 [hidden, ffn]). For each weight W: amax = max |W| over the whole weight, "
                "scale = 448 / max(amax, 1e-12) in fp32, W_fp8 = float8_e4m3fn(clamp(float32(W) * scale, -448, 448)) "
                "(round to nearest even). Every rank returns (W1_fp8 [ffn, hidden], W2_fp8 [hidden, ffn], both "
                "float8_e4m3fn; scales [2], float32).",
)


def _weight_shard(shape, generator, device, dtype, std):
    """Normal weights with a few rows five times larger (outliers, as trained weights have), so
    one shard's amax is not the whole weight's."""
    import torch

    rows = randn(shape, generator, device, dtype, scale=std)
    outlier = randn((shape[0], 1), generator, device, torch.float32) > 2.5
    return rows * (1 + 4 * outlier).to(dtype)


def make_inputs(rank, world, generator, device, dtype, *, hidden, ffn):
    own = rank_generator(generator, rank)
    return _weight_shard((ffn // world, hidden), own, device, dtype, 0.02), _weight_shard((hidden // world, ffn), own, device, dtype, 0.01)


def cost(world, dtype_bytes, *, hidden, ffn):
    full = 2 * hidden * ffn  # elements of both weights; one byte each on the wire
    return Cost(comm_bytes=(world - 1) / world * full + 8, flops=3 * full / world,
                hbm_bytes=2 * full / world * dtype_bytes + full / world + 2 * full)
