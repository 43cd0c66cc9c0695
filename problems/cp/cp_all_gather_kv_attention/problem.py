"""Context-parallel causal attention with all-gathered K/V and a load-balanced (zigzag) split.

Pattern from the context parallelism of Llama 3 training (as the Llama 3 paper describes it) and
the all-gather flavour of context-parallel attention in torchtitan / PyTorch's
``context_parallel``: the sequence is cut into 2W chunks and rank r holds chunks r and 2W-1-r,
so that under the causal mask every rank has the same amount of work. Before attention every
rank all-gathers the keys and values of all ranks (cheap with grouped-query attention: K/V have
far fewer heads than Q), puts the chunks back in sequence order, and computes causal attention
of its two query chunks over the keys up to each chunk's end. Each query head h reads KV head h
// (heads / kv_heads). Rank r returns the output for its own rows, in its input layout. The
all-gather is exposed unless it overlaps the attention of the chunks that have already arrived
(the local ones first: each query chunk needs keys only from chunks at or before it). Inputs
come in three regimes: scores of a few units; the same plus an offset of 100-200 per query row
and head (a bias all keys share, as a K projection with a bias gives, adds q . bias to all of a
query's scores), which leaves the softmax as it is but overflows fp32 in an exp taken without
the max; and queries scaled so that a row's scores spread with a standard deviation of 20-60
(large attention logits, a nearly one-hot softmax), where an exp stabilised by a stale max (the
first block's) overflows too.
"""

from problems.authoring import randn, rank_generator, with_key_bias, with_peaked_scores

from problems.contract import Cost, ProblemSpec

SPEC = ProblemSpec(
    name="cp_all_gather_kv_attention",
    category="cp",
    pattern="all-gather K/V, causal attention of the local zigzag query chunks",
    origin="Llama 3 context parallelism (all-gather K/V, 2W load-balanced chunks); torchtitan / PyTorch context_parallel "
           "all-gather attention",
    dtype="bfloat16",
    atol=1e-4,
    rtol=2**-8,
    regimes=3,
    shapes={"default": {"seq": 32768, "heads": 32, "kv_heads": 8, "head_dim": 128},
            "small": {"seq": 64, "heads": 4, "kv_heads": 2, "head_dim": 16}},
    description="The sequence of length seq is cut into 2*world chunks of c = seq/(2*world) rows; rank r holds chunks r and "
                "2*world-1-r, stacked in that order: q ([2c, heads, head_dim]), k and v ([2c, kv_heads, head_dim]). Rank r "
                "returns, for each of its 2c query rows (global position p), softmax(q_p K_g^T / sqrt(head_dim) over the keys "
                "at positions 0..p) V_g, where query head h uses KV head g = h // (heads / kv_heads); shape [2c, heads, head_dim].",
)


PLAIN, KEY_BIAS, PEAKED = 0, 1, 2  # regimes


def make_inputs(rank, world, generator, device, dtype, *, seq, heads, kv_heads, head_dim, regime=PLAIN):
    import torch

    own = rank_generator(generator, rank)
    rows = seq // world
    q = randn((rows, heads, head_dim), own, device, torch.float32)
    k = randn((rows, kv_heads, head_dim), own, device, torch.float32)
    v = randn((rows, kv_heads, head_dim), own, device, torch.float32)
    if regime == KEY_BIAS:
        q, k = with_key_bias(q, k, own)
    elif regime == PEAKED:
        q = with_peaked_scores(q, own)
    return q.to(dtype), k.to(dtype), v.to(dtype)


def cost(world, dtype_bytes, *, seq, heads, kv_heads, head_dim):
    kv_rows = 2 * kv_heads * head_dim * dtype_bytes  # one row of K and V
    rows = seq // world
    # the two chunks of a rank see (2W+1)c keys with half of each diagonal block masked: seq^2/(2W) query-key pairs
    return Cost(comm_bytes=(world - 1) * rows * kv_rows, flops=4 * seq * seq / (2 * world) * heads * head_dim,
                hbm_bytes=seq * kv_rows + 2 * rows * heads * head_dim * dtype_bytes)
