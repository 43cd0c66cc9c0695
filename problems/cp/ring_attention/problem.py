"""Causal ring attention: K/V chunks travel around a ring of ranks; each rank merges blockwise
attention with an online softmax.

Pattern from context parallelism for long sequences: ring-flash-attention's ``ring_flash_attn``
and Megatron-LM / TransformerEngine context parallelism (the P2P ring of
``AttnFuncWithCPAndKVP2P``), after Liu et al.'s Ring Attention. Each rank holds a contiguous
chunk of the sequence (queries, keys and values [S/W, H, D]). At every step a rank attends its
queries to the K/V chunk it holds, then passes that chunk to the next rank and receives one from
the previous, with the transfer overlapping the math. Partial results are merged with their
log-sum-exp; under the causal mask, K/V chunks from later ranks are skipped. Every rank returns
the attention output of its own queries. The contiguous layout leaves rank W-1 with W times the
work of rank 0; what a fast version may change is how the work and traffic are scheduled, not
the result. Inputs come in three regimes: scores of a few units; the same plus an offset of
100-200 per query row and head (a bias all keys share, as a K projection with a bias gives, adds
q . bias to all of a query's scores), which leaves the softmax as it is but overflows fp32 in an
exp taken without the max; and queries scaled so that a row's scores spread with a standard
deviation of 20-60 (large attention logits, a nearly one-hot softmax), where an exp stabilised
by a stale max (the first block's) overflows too.
"""

from problems.authoring import randn, rank_generator, with_key_bias, with_peaked_scores

from problems.contract import Cost, ProblemSpec

SPEC = ProblemSpec(
    name="ring_attention",
    category="cp",
    pattern="ring of P2P send/recv (K/V), online-softmax merge",
    origin="ring-flash-attention ring_flash_attn; Megatron-LM / TransformerEngine context parallelism (P2P K/V ring)",
    dtype="bfloat16",
    atol=1e-4,
    rtol=2**-8,
    regimes=3,
    shapes={"default": {"seq": 16384, "heads": 16, "head_dim": 128}, "small": {"seq": 64, "heads": 4, "head_dim": 16}},
    description="Rank r holds q, k, v = rows r*S/W..(r+1)*S/W-1 of the [seq, heads, head_dim] queries, keys and values; "
                "rank r returns softmax(q K^T / sqrt(head_dim) + causal mask) V for its rows over the whole sequence, "
                "shape [seq/world, heads, head_dim].",
)


PLAIN, KEY_BIAS, PEAKED = 0, 1, 2  # regimes


def make_inputs(rank, world, generator, device, dtype, *, seq, heads, head_dim, regime=PLAIN):
    import torch

    own = rank_generator(generator, rank)
    shape = (seq // world, heads, head_dim)
    q, k, v = (randn(shape, own, device, torch.float32) for _ in range(3))
    if regime == KEY_BIAS:
        q, k = with_key_bias(q, k, own)
    elif regime == PEAKED:
        q = with_peaked_scores(q, own)
    return q.to(dtype), k.to(dtype), v.to(dtype)


def cost(world, dtype_bytes, *, seq, heads, head_dim):
    chunk = seq // world * heads * head_dim * dtype_bytes
    # rank r needs the K/V of ranks 0..r-1: W(W-1)/2 chunk deliveries, (W-1)/2 per rank when relays are balanced
    return Cost(comm_bytes=(world - 1) / 2 * 2 * chunk, flops=2 * seq * seq * heads * head_dim / world,
                hbm_bytes=4 * chunk + (world - 1) * 2 * chunk)
