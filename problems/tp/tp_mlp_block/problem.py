"""Tensor-parallel SwiGLU MLP block: column-parallel gate/up GEMM, SiLU gating, row-parallel
down GEMM, all-reduce.

Pattern from Megatron-LM's ``MLP`` with tensor parallelism (``linear_fc1`` a
``ColumnParallelLinear`` producing the fused gate and up projections, ``linear_fc2`` a
``RowParallelLinear``), the block of Shoeybi et al.'s Megatron paper and of every TP inference
engine (vLLM, TensorRT-LLM, SGLang): each rank holds the full input X [T, H], the columns
of the gate and up weights for its F/W slice of the intermediate dimension, and the matching
rows of the down weight. The slices need no communication until the end, where the partial
[T, H] outputs are all-reduced, so every rank returns the block's output. About 6THF/W FLOPs
per rank against one [T, H] all-reduce: a fast version hides the all-reduce behind the down
GEMM, tile by tile, and fuses the SiLU gating into the GEMMs around it.
"""

from problems.authoring import randn, rank_generator

from problems.contract import Cost, ProblemSpec

SPEC = ProblemSpec(
    name="tp_mlp_block",
    category="tp",
    pattern="column-parallel GEMM, SwiGLU, row-parallel GEMM, all-reduce (sum)",
    origin="Megatron-LM MLP with tensor parallelism (ColumnParallelLinear fc1, RowParallelLinear fc2); vLLM / TensorRT-LLM TP MLP",
    dtype="bfloat16",
    atol=1e-3,
    rtol=2**-8,
    shapes={"default": {"tokens": 4096, "hidden": 8192, "ffn": 28672}, "small": {"tokens": 32, "hidden": 64, "ffn": 128}},
    description="Every rank holds the same input x ([tokens, hidden]); rank r holds w_gate_up_r ([hidden, 2*ffn/world]: the "
                "gate columns r*F/W..(r+1)*F/W-1, then the same up columns) and w_down_r ([ffn/world, hidden], rows "
                "r*F/W..(r+1)*F/W-1). With gate_r, up_r = the two halves of x @ w_gate_up_r, every rank returns the sum over "
                "ranks of (silu(gate_r) * up_r) @ w_down_r, shape [tokens, hidden].",
)


def make_inputs(rank, world, generator, device, dtype, *, tokens, hidden, ffn):
    x = randn((tokens, hidden), generator, device, dtype)  # shared: TP ranks hold the same activations
    own = rank_generator(generator, rank)
    w_gate_up = randn((hidden, 2 * ffn // world), own, device, dtype, scale=hidden**-0.5)
    w_down = randn((ffn // world, hidden), own, device, dtype, scale=ffn**-0.5)
    return x, w_gate_up, w_down


def cost(world, dtype_bytes, *, tokens, hidden, ffn):
    local = ffn // world
    out = tokens * hidden * dtype_bytes
    return Cost(comm_bytes=2 * (world - 1) / world * out, flops=6 * tokens * hidden * local + 4 * tokens * local,
                hbm_bytes=(3 * hidden * local + 3 * tokens * local) * dtype_bytes + 3 * out)
