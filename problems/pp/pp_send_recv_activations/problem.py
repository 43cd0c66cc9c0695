"""Pipeline stage boundary: each stage applies its MLP block and sends the activations on by P2P.

Pattern from pipeline parallelism in Megatron-LM (``p2p_communication.recv_forward`` /
``send_forward``, built on ``batch_isend_irecv``) and in PyTorch's ``torch.distributed.pipelining``:
the layers of a model are split into W consecutive stages, one per rank, and the activations of
a microbatch travel down the chain with point-to-point sends. Here every stage is one
transformer MLP block with its residual (the norm left out), ``h + gelu(h @ w1) @ w2`` (tanh
GELU, as Megatron's fused bias-GELU), with its own weights. Rank 0 reads the microbatch, rank r waits for
rank r-1's activations, applies its block and sends the result to rank r+1; every rank returns
the activations its stage produced (on the last rank, the pipeline's output; elsewhere, what it
passed on). The chain is inherently serial: what a fast version can win is the latency of each
hop (direct peer writes instead of a send/recv pair), and overlap, by splitting the microbatch
into row chunks so the next stage starts on the first rows while later ones are still computed.
Every rank's data loader yields the same microbatch, as in Megatron (where the first and last
stages load it); only rank 0 uses it.
"""

from problems.authoring import randn, rank_generator

from problems.contract import Cost, ProblemSpec

SPEC = ProblemSpec(
    name="pp_send_recv_activations",
    category="pp",
    pattern="chain of P2P send/recv of activations between consecutive pipeline stages",
    origin="Megatron-LM pipeline p2p_communication (send_forward / recv_forward over batch_isend_irecv); torch.distributed.pipelining",
    dtype="bfloat16",
    atol=1e-3,
    rtol=2**-8,
    shapes={"default": {"tokens": 4096, "hidden": 4096, "ffn": 16384}, "small": {"tokens": 16, "hidden": 32, "ffn": 64}},
    description="Every rank holds the same microbatch x ([tokens, hidden]) and the weights of its own stage, w1 ([hidden, ffn]) "
                "and w2 ([ffn, hidden]). With h_0 = x and h_{r+1} = h_r + gelu_tanh(h_r @ w1_r) @ w2_r, rank r returns "
                "h_{r+1}, shape [tokens, hidden] (rank world-1 returns the pipeline's output).",
)


def make_inputs(rank, world, generator, device, dtype, *, tokens, hidden, ffn):
    x = randn((tokens, hidden), generator, device, dtype)  # shared: the same microbatch on every rank
    own = rank_generator(generator, rank)
    w1 = randn((hidden, ffn), own, device, dtype, scale=hidden**-0.5)
    w2 = randn((ffn, hidden), own, device, dtype, scale=0.5 * ffn**-0.5)
    return x, w1, w2


def cost(world, dtype_bytes, *, tokens, hidden, ffn):
    activation = tokens * hidden * dtype_bytes
    flops = 4 * tokens * hidden * ffn + 10 * tokens * ffn
    return Cost(comm_bytes=activation, flops=flops,
                hbm_bytes=2 * hidden * ffn * dtype_bytes + 3 * activation + 2 * tokens * ffn * dtype_bytes)
