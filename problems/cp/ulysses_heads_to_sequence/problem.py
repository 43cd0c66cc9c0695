"""The reverse DeepSpeed-Ulysses all-to-all after attention (head-sharded to sequence-sharded),
then the attention output projection.

Pattern from DeepSpeed-Ulysses sequence parallelism (``DistributedAttention``: the second
``_SeqAllToAll`` after the local attention), also TransformerEngine's all-to-all context
parallelism (Megatron-LM ``cp_comm_type="a2a"``) and verl's Ulysses sequence parallelism
(``gather_heads_scatter_seq``): during attention each rank holds the whole sequence for H/W of
the heads; afterwards one all-to-all gives every rank back its contiguous sequence chunk with
all heads, which then goes through the output projection, whose weight every rank of the
group holds in full. Rank r sends sequence chunk j of its heads to rank j and returns
[S/W, H*D] @ W_o. This is the inverse of ``ulysses_all_to_all`` with the GEMM that consumes
its result. A fast version streams the received head groups into the GEMM (its K dimension
is the concatenation of the head groups, so each arriving group is one K-slice) rather than
waiting for the whole exchange.
"""

from problems.authoring import randn, rank_generator

from problems.contract import Cost, ProblemSpec

SPEC = ProblemSpec(
    name="ulysses_heads_to_sequence",
    category="cp",
    pattern="all-to-all: scatter sequence, gather heads; then local GEMM",
    origin="DeepSpeed-Ulysses DistributedAttention (output all-to-all) followed by the attention output projection",
    dtype="bfloat16",
    atol=1e-3,
    rtol=2**-8,
    shapes={"default": {"seq": 32768, "heads": 32, "head_dim": 128, "hidden": 4096},
            "small": {"seq": 64, "heads": 8, "head_dim": 8, "hidden": 32}},
    description="Rank r holds the attention output of head group r for the whole sequence, a_r = A[:, r*H/W:(r+1)*H/W, :] "
                "([seq, heads/world, head_dim]) of A [seq, heads, head_dim], and, like every rank, the output projection "
                "w_o ([heads*head_dim, hidden], rows ordered head-major). Rank r returns "
                "A[r*S/W:(r+1)*S/W].reshape(seq/world, heads*head_dim) @ w_o, shape [seq/world, hidden].",
)


def make_inputs(rank, world, generator, device, dtype, *, seq, heads, head_dim, hidden):
    w_o = randn((heads * head_dim, hidden), generator, device, dtype, scale=(heads * head_dim) ** -0.5)  # shared: replicated
    attn = randn((seq, heads // world, head_dim), rank_generator(generator, rank), device, dtype)
    return attn, w_o


def cost(world, dtype_bytes, *, seq, heads, head_dim, hidden):
    local = seq * (heads // world) * head_dim * dtype_bytes
    rows = seq // world
    return Cost(comm_bytes=(world - 1) / world * local, flops=2 * rows * heads * head_dim * hidden,
                hbm_bytes=3 * local + (heads * head_dim * hidden + rows * hidden) * dtype_bytes)
