"""Vocabulary-parallel embedding lookup: mask out-of-range token ids, look up locally, all-reduce.

Pattern from Megatron-LM's ``VocabParallelEmbedding`` (also NeMo, and the vocabulary-sharded
embedding of vLLM and TensorRT-LLM in tensor-parallel inference): the [V, H] embedding table is
split by vocabulary rows over the tensor-parallel ranks and every rank holds the same token ids.
A rank shifts the ids into its own range, looks up the ones it owns (id 0 for the others, whose
rows it then zeroes) and all-reduces, so every rank ends with the full [B, S, H] embeddings.
Every output element is one table entry plus W-1 zeros, so the result is exact. The all-reduce
moves a buffer that is (W-1)/W zeros: each rank needs only the rows it does not own, and could
push the rows it owns straight to the ranks that use them, half the bytes of a ring all-reduce
and without the zero-filled intermediate.
"""

from problems.authoring import randn, rank_generator

from problems.contract import Cost, ProblemSpec

SPEC = ProblemSpec(
    name="vocab_parallel_embedding",
    category="tp",
    pattern="masked local embedding lookup, all-reduce (sum)",
    origin="Megatron-LM tensor_parallel.VocabParallelEmbedding (NeMo; vLLM / TensorRT-LLM vocabulary-parallel embedding)",
    dtype="bfloat16",
    atol=0.0,
    rtol=0.0,
    shapes={"default": {"batch": 8, "seq": 1024, "vocab": 152064, "hidden": 5120},
            "small": {"batch": 2, "seq": 32, "vocab": 512, "hidden": 32}},
    description="Rank r holds rows r*V/W..(r+1)*V/W-1 of the [vocab, hidden] embedding table ([vocab/world, hidden]) and the "
                "same token ids as every rank ([batch, seq], int64 in 0..vocab-1). Every rank returns "
                "out[b, s] = table[tokens[b, s]], shape [batch, seq, hidden].",
)


def make_inputs(rank, world, generator, device, dtype, *, batch, seq, vocab, hidden):
    import torch

    tokens = torch.randint(0, vocab, (batch, seq), generator=generator, device=device)  # shared: ids are replicated over TP
    table = randn((vocab // world, hidden), rank_generator(generator, rank), device, dtype)
    return table, tokens


def cost(world, dtype_bytes, *, batch, seq, vocab, hidden):
    out = batch * seq * hidden * dtype_bytes
    # the least: a rank sends the rows it owns (1/W of the tokens, uniform ids) to the W-1 others, and receives the rest
    return Cost(comm_bytes=(world - 1) / world * out, hbm_bytes=out / world + out + batch * seq * 8)
