"""DeepSpeed-Ulysses all-to-all: from sequence-sharded [S/W, H, D] to head-sharded [S, H/W, D].

Pattern from DeepSpeed-Ulysses sequence parallelism (``DistributedAttention`` and its
``_SeqAllToAll``), also used by Megatron-LM's hierarchical context parallelism and long-context
inference engines: outside attention every rank holds a contiguous chunk of the sequence with
all heads; before attention one all-to-all gives every rank the whole sequence for H/W of the
heads (and the inverse all-to-all follows attention). Rank r sends head group j of its sequence
chunk to rank j and returns the full sequence of head group r. Pure data movement: the output
must be bit-exact. The layout change (a transpose of the head groups) can be folded into the
transfers themselves instead of costing extra passes over memory.
"""

from problems.authoring import randn, rank_generator

from problems.contract import Cost, ProblemSpec

SPEC = ProblemSpec(
    name="ulysses_all_to_all",
    category="cp",
    pattern="all-to-all: scatter heads, gather sequence",
    origin="DeepSpeed-Ulysses DistributedAttention (_SeqAllToAll); Megatron-LM hierarchical context parallelism",
    dtype="bfloat16",
    atol=0.0,
    rtol=0.0,
    shapes={"default": {"seq": 16384, "heads": 32, "head_dim": 128}, "small": {"seq": 64, "heads": 8, "head_dim": 8}},
    description="Rank r holds x_r = X[r*S/W:(r+1)*S/W] ([seq/world, heads, head_dim]) of a [seq, heads, head_dim] tensor X; "
                "rank r returns X[:, r*H/W:(r+1)*H/W, :], shape [seq, heads/world, head_dim].",
)


def make_inputs(rank, world, generator, device, dtype, *, seq, heads, head_dim):
    return (randn((seq // world, heads, head_dim), rank_generator(generator, rank), device, dtype),)


def cost(world, dtype_bytes, *, seq, heads, head_dim):
    local = seq // world * heads * head_dim * dtype_bytes
    return Cost(comm_bytes=(world - 1) / world * local, hbm_bytes=2 * local)
