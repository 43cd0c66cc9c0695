"""Vocabulary-parallel embedding lookup with a sequence-parallel output: masked local lookup,
then reduce-scatter along the sequence.

Pattern from Megatron-LM's ``VocabParallelEmbedding`` under sequence parallelism: the embedding
table is split by vocabulary rows over the tensor-parallel ranks and every rank holds the same
token ids [B, S]. A rank looks up the tokens that fall in its vocabulary range, writes zero
rows for the others, switches to the sequence-major [S, B, H] layout the transformer layers
use, and reduce-scatters along the sequence (``reduce_scatter_to_sequence_parallel_region``)
so that rank r ends with the embeddings of sequence positions r*S/W..(r+1)*S/W-1. Every output
element is the sum of one table entry and W-1 zeros, so the result is exact. The reduce-scatter
moves W times more than needed: each rank only has to fetch, from their owners, the rows of
its own S/W positions, and nobody needs to materialise the mostly-zero [S, B, H] buffer.
"""

from problems.authoring import randn, rank_generator

from problems.contract import Cost, ProblemSpec

SPEC = ProblemSpec(
    name="sp_embedding_reduce_scatter",
    category="sp",
    pattern="masked local embedding lookup, reduce-scatter along the sequence",
    origin="Megatron-LM VocabParallelEmbedding with sequence parallelism (reduce_scatter_to_sequence_parallel_region)",
    dtype="bfloat16",
    atol=0.0,
    rtol=0.0,
    shapes={"default": {"batch": 2, "seq": 16384, "vocab": 128256, "hidden": 4096},
            "small": {"batch": 2, "seq": 64, "vocab": 512, "hidden": 32}},
    description="Rank r holds rows r*V/W..(r+1)*V/W-1 of the [vocab, hidden] embedding table ([vocab/world, hidden]) and the "
                "same token ids as every rank ([batch, seq], int64 in 0..vocab-1). Rank r returns the embeddings of sequence "
                "positions r*seq/world..(r+1)*seq/world-1 in sequence-major layout: out[i, b] = table[tokens[b, r*seq/world + i]], "
                "shape [seq/world, batch, hidden].",
)


def make_inputs(rank, world, generator, device, dtype, *, batch, seq, vocab, hidden):
    import torch

    tokens = torch.randint(0, vocab, (batch, seq), generator=generator, device=device)  # shared: ids are replicated over TP
    table = randn((vocab // world, hidden), rank_generator(generator, rank), device, dtype)
    return table, tokens


def cost(world, dtype_bytes, *, batch, seq, vocab, hidden):
    row = hidden * dtype_bytes
    own_positions = batch * seq // world
    # the least: a rank receives the rows of its own positions held by others, and sends the rows it owns to
    # the ranks whose positions use them (uniform ids: (W-1)/W of each in expectation)
    return Cost(comm_bytes=(world - 1) / world * own_positions * row,
                hbm_bytes=2 * own_positions * row + batch * seq * 8)
