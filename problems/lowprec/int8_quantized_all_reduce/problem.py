"""Gradient all-reduce with blockwise int8 quantization on the wire (ZeRO++ qgZ style).

Pattern from DeepSpeed ZeRO++'s quantized gradient communication (qgZ, Wang et al. 2023),
which replaces the reduce-scatter of bf16 gradients by an all-to-all of int8 blocks followed by
a dequantize-and-reduce, and from the quantized all-reduces built on it (requantize the reduced
shard, all-gather, dequantize). Each rank holds a gradient bucket of ``numel`` values split into
W chunks; chunk c is reduced on rank c. Every block of 256 values carries its own fp32
scale: ``scale = 127 / amax(block)``, ``q = clamp(round_half_even(x * scale), -127, 127)`` in
int8, dequantized as ``q / scale``. The steps: quantize every chunk; all-to-all (int8 values and
their scales); dequantize the W received copies of this rank's chunk and sum them in fp32 in
rank order 0..W-1; requantize the sum; all-gather (int8 and scales); dequantize the whole bucket
and cast it to the gradient's dtype. Half the bytes of a bf16 ring all-reduce cross the
interconnect. Every operation is specified to the bit: IEEE fp32 quotients and products, round
half to even, and the summation order (a different order changes the fp32 sum by an ulp now and
then, which can flip a requantized integer by one step of the block's scale). The scale is written
``127 / amax`` because torch on CUDA turns a division by a Python scalar into a product with its
reciprocal, which ``amax / 127`` would suffer from. So the result is deterministic on every rank
and is compared exactly, without an upcast run (an fp32 run quantizes the same values to the same
integers, so it would add nothing): a fast version must fuse and overlap, not change the
arithmetic, and a wrong scale (128 instead of 127, one per chunk instead of per block),
truncation instead of rounding or a skipped requantization fail.
"""

from problems.authoring import randn, rank_generator

from problems.contract import Cost, ProblemSpec

SPEC = ProblemSpec(
    name="int8_quantized_all_reduce",
    category="lowprec",
    pattern="blockwise int8 quantize, all-to-all, dequantize-reduce, requantize, all-gather, dequantize",
    origin="DeepSpeed ZeRO++ qgZ (all-to-all quantized gradient reduction, blockwise int8)",
    dtype="bfloat16",
    atol=0.0,
    rtol=0.0,
    upcast=False,
    shapes={"default": {"numel": 32 * 2**20}, "small": {"numel": 4096}},
    description="Each rank holds a gradient bucket g ([numel]); every rank returns the all-reduced bucket as computed by the "
                "quantized algorithm: chunk c = g[c*numel/W:(c+1)*numel/W] of every rank is quantized in blocks of 256 "
                "(scale = 127/amax in fp32, q = clamp(round_half_even(x*scale), -127, 127) as int8), sent to rank c, "
                "dequantized (q/scale) and summed in fp32 in rank order, requantized the same way, all-gathered, dequantized "
                "and cast to g's dtype. Shape [numel], dtype of g.",
)


BLOCK = 256  # values per quantization block (numel is a multiple of world * BLOCK)


def make_inputs(rank, world, generator, device, dtype, *, numel):
    import torch

    own = rank_generator(generator, rank)
    # gradients whose magnitude varies from block to block, as across the layers of a bucket
    spread = torch.exp(2 * torch.rand((numel // BLOCK, 1), generator=own, device=device)) / 8
    return (randn((numel // BLOCK, BLOCK), own, device, torch.float32).mul_(spread).reshape(numel).to(dtype),)


def cost(world, dtype_bytes, *, numel):
    wire = numel * (1 + 4 / BLOCK)  # int8 values and fp32 scales
    return Cost(comm_bytes=2 * (world - 1) / world * wire, flops=4 * numel + 3 * numel,
                hbm_bytes=2 * numel * dtype_bytes + 4 * wire)
