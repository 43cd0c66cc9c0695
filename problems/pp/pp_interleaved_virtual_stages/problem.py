"""Interleaved pipeline schedule, forward only: two virtual stages (model chunks) per rank.

Pattern from Megatron-LM's interleaved 1F1B schedule (``forward_backward_pipelining_with_interleaving``,
``virtual_pipeline_model_parallel_size`` = 2, from Narayanan et al. 2021) run with
``forward_only=True``, as in evaluation and in the generation/log-prob passes of RL trainers
(NeMo-RL, verl on Megatron). The model's 2W layers are split into 2W virtual stages; rank r holds
chunk 0 (virtual stage r) and chunk 1 (virtual stage W + r), so a microbatch visits ranks
0, 1, ..., W-1, 0, 1, ..., W-1 and the activations travel a ring, rank W-1 handing chunk 0's
output back to rank 0. Each rank processes its work in Megatron's order (W microbatches on chunk
0, then the same W on chunk 1, then the next W) and, after every forward, sends its output to the
next rank and receives the next input from the previous one in one batched exchange. Every layer
is the residual block ``h + gelu(h @ w)`` (tanh GELU). Every rank returns its chunk-1 outputs for
all microbatches: on rank W-1 the model's outputs, elsewhere what it passed on. Interleaving
halves the pipeline bubble at the price of twice the P2P traffic, which is why these transfers
must be fast and overlapped. Every rank's data loader yields the same microbatches (rank 0
reads them).
"""

from problems.authoring import randn, rank_generator

from problems.contract import Cost, ProblemSpec

SPEC = ProblemSpec(
    name="pp_interleaved_virtual_stages",
    category="pp",
    pattern="interleaved pipeline (2 model chunks per rank): batched P2P send-forward/recv-forward around a ring",
    origin="Megatron-LM forward_backward_pipelining_with_interleaving (virtual pipeline stages), forward_only as in "
           "NeMo-RL / verl log-prob passes",
    dtype="bfloat16",
    atol=1e-3,
    rtol=2**-8,
    shapes={"default": {"microbatches": 16, "tokens": 1024, "hidden": 4096},
            "small": {"microbatches": 8, "tokens": 4, "hidden": 32}},
    description="Every rank holds the same microbatches x ([microbatches, tokens, hidden]; microbatches is a multiple of world) "
                "and the weights w ([2, hidden, hidden]) of its two model chunks: w[c] is virtual stage c*world + rank. "
                "Virtual stage v maps h to h + gelu_tanh(h @ w_v); microbatch m enters virtual stage 0 as x[m]. Rank r "
                "returns the outputs of virtual stage world + r for every microbatch, [microbatches, tokens, hidden].",
)


def make_inputs(rank, world, generator, device, dtype, *, microbatches, tokens, hidden):
    x = randn((microbatches, tokens, hidden), generator, device, dtype)  # shared: the data loader's microbatches
    w = randn((2, hidden, hidden), rank_generator(generator, rank), device, dtype, scale=0.5 * hidden**-0.5)
    return x, w


def cost(world, dtype_bytes, *, microbatches, tokens, hidden):
    activation = tokens * hidden * dtype_bytes
    # each rank sends every microbatch's output of both chunks on, except rank W-1's final outputs
    return Cost(comm_bytes=2 * microbatches * activation, flops=2 * microbatches * (2 * tokens * hidden * hidden + 8 * tokens * hidden),
                hbm_bytes=microbatches * 7 * activation + 2 * hidden * hidden * dtype_bytes)
