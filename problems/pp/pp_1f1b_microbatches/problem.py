"""One training step of a pipeline under the 1F1B schedule: forward and backward of M microbatches.

Pattern from Megatron-LM's non-interleaved pipeline schedule
(``forward_backward_pipelining_without_interleaving``, after PipeDream-Flush): each of the W ranks
holds one stage, here a residual block ``h + gelu(h @ w)`` (tanh GELU). Rank r first runs W-r-1
warm-up forwards, then alternates one forward and one backward ("1F1B") and ends with the
remaining backwards, so at most W-r microbatches' activations are alive at once. Activations go
down the pipeline and their gradients come back up by P2P, paired in one batched exchange
(send-forward-and-receive-backward, send-backward-and-receive-forward) as Megatron does. The
last stage's loss is the squared error against targets, ``sum 0.5 |y - target|^2``, so its output
gradient is ``y - target``. Each rank accumulates its weight gradient over the microbatches in
fp32 (Megatron's ``main_grad``) and returns it. The activations, their gradients and the targets
of one microbatch are tens of MB; a fast version overlaps the transfers with the GEMMs, writes
activations straight into the next stage's memory and shortens the bubble, but must reproduce
the same gradients. Every rank's data loader yields the same microbatches and targets (only the
first and last stages read them).
"""

from problems.authoring import randn, rank_generator

from problems.contract import Cost, ProblemSpec

SPEC = ProblemSpec(
    name="pp_1f1b_microbatches",
    category="pp",
    pattern="1F1B pipeline schedule: batched P2P of activations down and gradients up, per microbatch",
    origin="Megatron-LM forward_backward_pipelining_without_interleaving (PipeDream-Flush 1F1B)",
    dtype="bfloat16",
    atol=1e-3,
    rtol=2**-8,
    shapes={"default": {"microbatches": 8, "tokens": 2048, "hidden": 4096},
            "small": {"microbatches": 4, "tokens": 8, "hidden": 32}},
    description="Every rank holds the same microbatches x ([microbatches, tokens, hidden]) and targets (same shape), and the "
                "weight w ([hidden, hidden]) of its own stage. Stage r maps h to h + gelu_tanh(h @ w_r); microbatch m enters "
                "stage 0 as x[m]; the loss is sum_m 0.5 * |y_m - targets[m]|^2 on the last stage's outputs y_m. Rank r returns "
                "d loss / d w_r, accumulated over microbatches in fp32, shape [hidden, hidden], float32.",
)


def make_inputs(rank, world, generator, device, dtype, *, microbatches, tokens, hidden):
    x = randn((microbatches, tokens, hidden), generator, device, dtype)  # shared: the data loader's microbatches
    targets = randn((microbatches, tokens, hidden), generator, device, dtype)
    w = randn((hidden, hidden), rank_generator(generator, rank), device, dtype, scale=hidden**-0.5)
    return x, targets, w


def cost(world, dtype_bytes, *, microbatches, tokens, hidden):
    activation = tokens * hidden * dtype_bytes
    # an inner stage sends each microbatch's activations down and its input gradient up
    return Cost(comm_bytes=2 * microbatches * activation, flops=6 * microbatches * tokens * hidden * hidden,
                hbm_bytes=microbatches * 8 * activation + 3 * hidden * hidden * dtype_bytes + 2 * hidden * hidden * 4)
