"""Halo exchange for a 1-D convolution over a sequence split across ranks.

Pattern from spatial / context parallelism for convolutions: NVIDIA PhysicsNeMo's
``ShardTensor`` (and DistDL before it) shards a signal along a spatial axis and, before each
convolution, pads every shard with "halo" rows received from its neighbours, so the local
convolution gives exactly the rows it would give on the whole signal; Hyena / StripedHyena
style models under context parallelism need the same exchange for their short depthwise
convolutions along the sequence. Here each rank holds a contiguous chunk [B, S/W, C] of a
channels-last signal and applies a centred depthwise convolution of odd width K (zero padding
at the two ends of the whole sequence): it sends its first and last (K-1)/2 rows to the
previous and next rank and receives theirs. The halos are a few KB, so the exchange is pure
latency: a fast version convolves the interior while the halos are in flight, fuses the
padding and the layout changes into the convolution, and reads and writes the shard once.
"""

from problems.authoring import randn, rank_generator

from problems.contract import Cost, ProblemSpec

SPEC = ProblemSpec(
    name="cp_halo_exchange",
    category="cp",
    pattern="P2P halo exchange with both neighbours, then a local depthwise convolution",
    origin="PhysicsNeMo ShardTensor halo padding for sharded convolutions (spatial parallelism); "
           "Hyena / StripedHyena short convolutions under context parallelism",
    dtype="bfloat16",
    atol=1e-3,
    rtol=2**-8,
    shapes={"default": {"batch": 2, "seq": 32768, "channels": 4096, "kernel": 7},
            "small": {"batch": 2, "seq": 64, "channels": 16, "kernel": 5}},
    description="Rank r holds x_r = X[:, r*S/W:(r+1)*S/W, :] ([batch, seq/world, channels]) of a [batch, seq, channels] signal X, "
                "and, like every rank, the depthwise filter weight ([channels, kernel], kernel odd) and bias ([channels]). "
                "With h = (kernel-1)/2 and X taken as zero outside 0..seq-1, rank r returns "
                "out[b, t, c] = bias[c] + sum_j weight[c, j] * X[b, r*S/W + t + j - h, c] for its rows t, "
                "shape [batch, seq/world, channels].",
)


def make_inputs(rank, world, generator, device, dtype, *, batch, seq, channels, kernel):
    weight = randn((channels, kernel), generator, device, dtype, scale=kernel**-0.5)  # shared: the layer's parameters
    bias = randn(channels, generator, device, dtype, scale=0.1)
    x = randn((batch, seq // world, channels), rank_generator(generator, rank), device, dtype)
    return x, weight, bias


def cost(world, dtype_bytes, *, batch, seq, channels, kernel):
    halo = (kernel - 1) // 2 * batch * channels * dtype_bytes
    shard = batch * (seq // world) * channels
    return Cost(comm_bytes=2 * halo if world > 2 else halo, flops=2 * kernel * shard,
                hbm_bytes=2 * shard * dtype_bytes + 2 * halo + channels * (kernel + 1) * dtype_bytes)
