"""k-nearest-neighbour retrieval against a feature bank sharded over ranks (k-NN evaluation).

Pattern from DINOv2's k-NN evaluation (and the same protocol in DINO, iBOT and SimCLR-style
evaluations, and in retrieval services over sharded embedding indexes): the features of the
training set (the bank) are computed in data-parallel, so each rank holds a shard; each rank
scores its own query features against the whole bank and keeps, for every query, the k best
train samples (scores and global indices), which then vote for the label. Here every rank
all-gathers the bank shards, computes the dot-product similarity of its queries with every train
feature and takes the top k. Train index i*B/W + j is row j of rank i's shard. The features are
small integers carried in bf16 (an int8-quantized bank, as large retrieval indexes store): every
similarity is an integer that fp32 accumulation represents exactly, so every GEMM order (and
bf16 tensor cores with fp32 accumulation) gives the same scores, ties are real ties, and they are
broken toward the smaller train index; the indices are therefore well defined and compared
exactly. Gathering the bank moves (W-1)/W of it to every rank; sending the queries to the shards
instead and merging the per-shard top-k lists moves far less, the optimisation a fast version
should find (the cost model counts the cheaper route).
"""

from problems.authoring import rank_generator

from problems.contract import Cost, ProblemSpec

SPEC = ProblemSpec(
    name="distributed_knn",
    category="domain",
    pattern="all-gather of bank shards, similarity GEMM, top-k with deterministic ties",
    origin="DINOv2 k-NN evaluation (sharded train-feature bank); DINO / iBOT k-NN protocol",
    dtype="bfloat16",
    atol=0.0,
    rtol=0.0,
    shapes={"default": {"bank": 262144, "queries": 1024, "dim": 768}, "small": {"bank": 256, "queries": 16, "dim": 32}},
    description="Rank r holds bank ([bank/world, dim], rows r*bank/world.. of the train features) and queries ([queries, dim]); "
                "all values are integers. Every rank returns, for each of its queries, the k = 20 largest dot products with "
                "the whole bank in descending order (ties: smaller train index first): scores ([queries, 20], float32) and "
                "indices ([queries, 20], int64 global train indices).",
)

K = 20  # neighbours kept per query (DINOv2 evaluates k = 10, 20, 100, 200)
CLASSES = 100  # class centroids the features cluster around


def _features(count, centroids, generator, device, dtype):
    """Integer features in [-15, 15]: a random class centroid plus noise, rounded."""
    import torch

    labels = torch.randint(0, centroids.shape[0], (count,), generator=generator, device=device)
    noisy = centroids[labels] + 4 * torch.randn((count, centroids.shape[1]), generator=generator, device=device)
    return noisy.round().clamp(-15, 15).to(dtype)


def make_inputs(rank, world, generator, device, dtype, *, bank, queries, dim):
    import torch

    centroids = 5 * torch.randn((CLASSES, dim), generator=generator, device=device)  # shared: the classes
    own = rank_generator(generator, rank)
    return _features(bank // world, centroids, own, device, dtype), _features(queries, centroids, own, device, dtype)


def cost(world, dtype_bytes, *, bank, queries, dim):
    shard = bank // world * dim * dtype_bytes
    # sending the queries and merging per-shard top-k lists beats gathering the bank
    query_route = (world - 1) * (queries * dim * dtype_bytes + queries * K * 12)
    # on that route a rank reads its own shard once and every rank's queries
    return Cost(comm_bytes=min((world - 1) * shard, query_route), flops=2 * queries * bank * dim + queries * bank,
                hbm_bytes=shard + world * queries * dim * dtype_bytes + 2 * world * queries * K * 12)
