"""Distributed GNN feature fetch: gather the features of remote nodes by global id (uneven all-to-all).

Pattern from DGL's distributed training (``DistTensor`` pulls from the KVStore of a METIS-partitioned
graph; ``dgl.distributed`` with ``NodeDataLoader``) and from PyG / GraphLearn feature stores:
every rank owns the feature rows of a contiguous range of node ids (N/W nodes, row i of rank r is
node r*N/W + i). To build a minibatch, a rank samples a neighbourhood and needs the features of
its input nodes, most of them owned elsewhere. It groups the requested ids by owner, the ranks
exchange request counts and then the ids with an uneven all-to-all, each owner gathers the
requested rows from its shard, and a second uneven all-to-all brings the rows back, which are put
back in request order. Requests are unique per rank (the input nodes of a sampled block), mostly
remote, with some locality (partitioning keeps part of each neighbourhood on its own rank) and a
few hub nodes wanted by every rank. Pure data movement, so the output is bit-exact. The feature
rows are the bulk of the traffic (hundreds of bytes each); a fast version reads the owners'
shards directly (one-sided gets) instead of the two-phase exchange.
"""

from problems.authoring import randn, rank_generator

from problems.contract import Cost, ProblemSpec

LOCAL_FRACTION = 0.25  # share of a rank's requests for nodes it owns itself
HUB_FRACTION = 0.125  # share for the hub nodes, wanted by every rank

SPEC = ProblemSpec(
    name="gnn_feature_exchange",
    category="domain",
    pattern="group ids by owner, count exchange, uneven all-to-all of ids, gather rows, uneven all-to-all back",
    origin="DGL distributed training (DistTensor pull from a partitioned KVStore); PyG feature stores",
    dtype="bfloat16",
    atol=0.0,
    rtol=0.0,
    shapes={"default": {"nodes": 2**21, "features": 768, "requests": 65536},
            "small": {"nodes": 512, "features": 16, "requests": 64}},
    description="Rank r holds features ([nodes/world, features], the rows of nodes r*nodes/world..(r+1)*nodes/world-1) and "
                "ids ([requests], int64, distinct global node ids). Every rank returns the features of its requested nodes "
                "in request order, shape [requests, features].",
)


def make_inputs(rank, world, generator, device, dtype, *, nodes, features, requests):
    import torch

    own = rank_generator(generator, rank)
    per_rank = nodes // world
    hubs = int(requests * HUB_FRACTION)
    local = int(requests * LOCAL_FRACTION)
    hub_ids = torch.randperm(nodes, generator=generator, device=device)[:hubs]  # shared: the same hubs on every rank
    # the rest: distinct non-hub ids, `local` of them from this rank's own range
    is_hub = torch.zeros(nodes, dtype=torch.bool, device=device)
    is_hub[hub_ids] = True
    owner = torch.arange(nodes, device=device) // per_rank
    mine = (~is_hub & (owner == rank)).nonzero().squeeze(1)
    others = (~is_hub & (owner != rank)).nonzero().squeeze(1)
    remote = min(requests - hubs - local, others.numel())
    local_ids = mine[torch.randperm(mine.numel(), generator=own, device=device)[:requests - hubs - remote]]
    remote_ids = others[torch.randperm(others.numel(), generator=own, device=device)[:remote]]
    ids = torch.cat([hub_ids, local_ids, remote_ids])
    ids = ids[torch.randperm(requests, generator=own, device=device)]
    return randn((per_rank, features), own, device, dtype), ids


def cost(world, dtype_bytes, *, nodes, features, requests):
    remote = requests * (1 - LOCAL_FRACTION - HUB_FRACTION / world)  # expected requests owned by another rank
    row = features * dtype_bytes
    return Cost(comm_bytes=remote * (8 + row), hbm_bytes=2 * requests * row + 4 * 8 * requests)
