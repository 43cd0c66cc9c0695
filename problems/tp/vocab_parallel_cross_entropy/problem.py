"""Cross-entropy over a vocabulary sharded across tensor-parallel ranks (per-token loss).

Pattern from Megatron-LM's ``vocab_parallel_cross_entropy`` (also used by NeMo and
TorchTitan's loss-parallel): the output layer is column-parallel over the vocabulary, so each
rank holds the logits of V/W vocabulary entries for every token and the full logits are never
gathered. The loss ``log(sum_v exp(l_v)) - l_target`` is assembled from three all-reduces over
per-token scalars: the max logit (for a stable exponent), the sum of exponentials, and the
target's logit (non-zero only on the rank that owns the target's vocabulary slice). As in
Megatron, the math runs in fp32 on bf16 logits and the per-token loss is fp32. The logits are
the big tensor (hundreds of MB): a good kernel reads them once (online max + sum-exp) and
replaces the three small, latency-bound all-reduces by one. Inputs come in two regimes: logits
of a few units, and the same shifted by 60-120 per token (a confident model's), where a sum of
exponentials taken without the max overflows fp32.
"""

from problems.authoring import randn, rank_generator

from problems.contract import Cost, ProblemSpec

SPEC = ProblemSpec(
    name="vocab_parallel_cross_entropy",
    category="tp",
    pattern="three all-reduces of per-token scalars (max, sum of exponentials, target logit)",
    origin="Megatron-LM tensor_parallel.vocab_parallel_cross_entropy (NeMo, TorchTitan loss-parallel)",
    dtype="bfloat16",
    atol=1e-4,
    rtol=1e-5,
    regimes=2,
    shapes={"default": {"tokens": 4096, "vocab": 128256}, "small": {"tokens": 64, "vocab": 256}},
    description="Rank r holds logits[:, r*V/W:(r+1)*V/W] ([tokens, vocab/world], bf16) and the same targets ([tokens], int64, "
                "indices into the full vocabulary) as every rank; every rank returns the fp32 per-token loss "
                "logsumexp(logits[t, :]) - logits[t, target[t]], shape [tokens].",
)


PLAIN, SHIFTED = 0, 1  # regimes
SHIFT_RANGE = (60.0, 120.0)  # SHIFTED: added to every logit of a token (the loss is the same; exp(l) overflows above ~88.7)


def make_inputs(rank, world, generator, device, dtype, *, tokens, vocab, regime=PLAIN):
    import torch

    target = torch.randint(0, vocab, (tokens,), generator=generator, device=device)  # shared: all ranks hold the same labels
    shift = SHIFT_RANGE[0] + (SHIFT_RANGE[1] - SHIFT_RANGE[0]) * torch.rand((tokens, 1), generator=generator, device=device)
    logits = randn((tokens, vocab // world), rank_generator(generator, rank), device, torch.float32, scale=2.0)
    return (logits + shift if regime == SHIFTED else logits).to(dtype), target


def cost(world, dtype_bytes, *, tokens, vocab):
    logits = tokens * (vocab // world)
    return Cost(comm_bytes=(world - 1) / world * tokens * 12, flops=5 * logits, hbm_bytes=logits * dtype_bytes + tokens * 20)
