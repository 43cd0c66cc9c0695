"""Reduce-scatter of gradients in float8 (e5m2) with one scale per block of 128 values.

Pattern from FP8 gradient communication in low-precision training: MS-AMP's FP8 gradient
reduce-scatter for ZeRO (Peng et al. 2023), with the fine-grained 1x128 block scaling of
DeepSeek-V3 and TransformerEngine's MXFP8/blockwise recipes instead of one scale per tensor, and
e5m2 for gradients as in the hybrid fp8 format. Each rank holds a flat gradient bucket split into
W chunks (chunk c belongs to rank c, as in FSDP / ZeRO-2). Every block of 128 values is cast to
float8_e5m2 with its own fp32 scale ``57344 / amax(block)``; the fp8 bytes and the scales are
exchanged with one all-to-all each, and rank c dequantizes the W copies of its chunk
(``q / scale``) and sums them in fp32. Every rank returns its reduced fp32
chunk (gradients are reduced and kept in fp32 for the optimizer, as FSDP's ``reduce_dtype``).
The wire carries a quarter of an fp32 reduce-scatter's bytes. The quantization is specified to
the bit (fp32 products, round to nearest even with saturation), so the fp8 codes are exact and
there is no upcast run (an fp32 run casts the same values to the same codes); the sums are
compared with a tolerance of a few fp32 ulps of the terms (atol 1e-4, rtol 1e-6), so summing in
another order, with FMAs or with reciprocal scales passes, while one fp8 step is a 25% error of
a term: a per-chunk or per-tensor scale, e4m3 instead of e5m2, a truncating cast or a missing
rank fail.
"""

from problems.authoring import randn, rank_generator

from problems.contract import Cost, ProblemSpec

BLOCK = 128  # values per scaling block (numel is a multiple of world * BLOCK)

SPEC = ProblemSpec(
    name="fp8_reduce_scatter_grads",
    category="lowprec",
    pattern="blockwise fp8 (e5m2) quantize, all-to-all of fp8 bytes and scales, dequantize and sum in fp32",
    origin="MS-AMP FP8 gradient reduce-scatter (ZeRO); 1x128 block scaling as in DeepSeek-V3 / TransformerEngine blockwise fp8",
    dtype="bfloat16",
    atol=1e-4,
    rtol=1e-6,
    upcast=False,
    shapes={"default": {"numel": 64 * 2**20}, "small": {"numel": 4096}},
    description="Each rank holds a gradient bucket g ([numel]). For every block b of 128 values of every rank's g: scale = "
                "57344 / amax(b) (fp32), q = float8_e5m2(clamp(float32(b) * scale, -57344, 57344)), round to nearest even. "
                "Rank c returns the fp32 sum over ranks s of float32(q) / scale for the blocks of chunk c "
                "= g_s[c*numel/world:(c+1)*numel/world], shape [numel/world], float32.",
)


def make_inputs(rank, world, generator, device, dtype, *, numel):
    import torch

    own = rank_generator(generator, rank)
    # magnitudes that vary from block to block (as across the layers of a bucket), with rare outliers
    spread = torch.exp(3 * torch.rand((numel // BLOCK, 1), generator=own, device=device)) / 16
    grad = randn((numel // BLOCK, BLOCK), own, device, torch.float32).mul_(spread)
    grad = grad * torch.where(torch.rand(grad.shape, generator=own, device=device) < 1e-3, 20.0, 1.0)
    return (grad.reshape(numel).to(dtype),)


def cost(world, dtype_bytes, *, numel):
    wire = numel * (1 + 4 / BLOCK)  # fp8 values and fp32 scales
    return Cost(comm_bytes=(world - 1) / world * wire, flops=3 * numel + 2 * numel,
                hbm_bytes=numel * dtype_bytes + 2 * wire + 4 * numel / world)
