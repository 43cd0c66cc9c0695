"""Scatter from rank 0: rank r returns row block r of rank 0's tensor.

Pattern from sharding a full tensor that one rank holds: PyTorch DTensor's
``distribute_tensor`` with a ``Shard(0)`` placement scatters row blocks from ``src_data_rank``
(rank 0 by default) to the mesh, which is how torchtitan / FSDP2 and tensor-parallel model
set-up turn a full checkpoint tensor or a freshly initialised weight on one rank into
per-rank shards; ``torch.distributed.scatter`` also hands out per-rank data prepared on rank 0.
Every rank passes a tensor of the full shape; only rank 0's contents matter. Pure data
movement: the output must be bit-exact. Rank 0's outgoing bandwidth is the bottleneck (it
must send (W-1)/W of its buffer, and nobody else has the data); a fast version writes every
block straight into its owner's output, all peers at once.
"""

from problems.authoring import randn, rank_generator

from problems.contract import Cost, ProblemSpec

SPEC = ProblemSpec(
    name="scatter_from_root",
    category="collective",
    pattern="scatter from rank 0 (row blocks)",
    origin="PyTorch DTensor distribute_tensor with Shard(0) (mesh_scatter from src_data_rank; torchtitan / FSDP2 weight "
           "sharding); torch.distributed.scatter",
    dtype="bfloat16",
    atol=0.0,
    rtol=0.0,
    shapes={"default": {"rows": 8192, "hidden": 8192}, "small": {"rows": 64, "hidden": 64}},
    description="Each rank holds a [rows, hidden] tensor; only rank 0's contents matter. Rank r returns rows "
                "r*rows/world..(r+1)*rows/world-1 of rank 0's tensor, shape [rows/world, hidden].",
)


def make_inputs(rank, world, generator, device, dtype, *, rows, hidden):
    return (randn((rows, hidden), rank_generator(generator, rank), device, dtype),)


def cost(world, dtype_bytes, *, rows, hidden):
    size = rows * hidden * dtype_bytes
    return Cost(comm_bytes=(world - 1) / world * size, hbm_bytes=2 * size / world + (world - 1) / world * size)
