"""Helpers for writing a problem's ``make_inputs``: per-rank generators and the random draws
several problems share. What a problem must define is in :mod:`problems.contract`."""

from __future__ import annotations


def rank_generator(generator, rank: int):
    """A generator for this rank's own data, derived from the trial's shared generator.

    The harness seeds ``generator`` identically on every rank (so ranks can draw shared data
    such as routing tables); per-rank data comes from this one. Its seed is a hash of the shared
    seed and the rank, so one rank's seed says nothing of another's: a CPU generator keeps only a
    seed's low 32 bits, and seeds that differed by a known constant let a rank that searched out
    its own (2**32 tries) draw every other rank's inputs."""
    import hashlib

    import torch

    digest = hashlib.sha256(f"kloop-rank-generator:{generator.initial_seed()}:{rank}".encode()).digest()
    derived = torch.Generator(device=generator.device)
    derived.manual_seed(int.from_bytes(digest[:8], "little") % 2**63)
    return derived


def randn(shape, generator, device, dtype, scale: float = 1.0, mean: float = 0.0):
    """Normal values drawn in fp32 (identical whatever the target dtype), then cast."""
    import torch

    values = torch.randn(shape, generator=generator, device=device, dtype=torch.float32)
    return (values * scale + mean).to(dtype)


def mixed_magnitudes(values, generator, dim: int | None = None, small_share: float = 0.75, factor: float = 2.0**-8):
    """``values`` with a random ``small_share`` of its elements (of its slices along ``dim``, where
    given) made ``factor`` times smaller: values of very different sizes side by side, as gradients
    and activations often hold. A lossy transfer that rounds each value to a step set by the
    largest of its block (block-scaled int8) loses the small ones, which the judge's rounding bound
    then sees (``ProblemSpec.sum_of_products``). Exact in any floating dtype (a power-of-two factor)."""
    import torch

    size = tuple(values.shape) if dim is None else (values.shape[dim],)
    small = torch.rand(size, generator=generator, device=values.device) < small_share
    scale = torch.where(small, factor, 1.0).to(values.dtype)
    if dim is not None:
        scale = scale.reshape([-1 if axis == dim % values.dim() else 1 for axis in range(values.dim())])
    return values * scale


def topk_routing(generator, popularity, tokens: int, top_k: int):
    """A top-k router's choices for ``tokens`` tokens: fp32 logits drawn from ``generator`` plus
    the shared per-expert bias ``popularity`` ([experts]), then the top_k experts of each token.
    Returns the expert ids ([tokens, top_k], int64) and their gate probabilities (the softmax of
    the top_k logits, fp32, as routers compute it)."""
    import torch

    experts = popularity.shape[0]
    router_logits = torch.randn((tokens, experts), generator=generator, device=popularity.device) + popularity
    top_logits, expert_index = router_logits.topk(top_k, dim=-1)
    return expert_index, torch.softmax(top_logits, dim=-1)


def adam_hparams(generator, device):
    """Hyper-parameters of the optimizer problems: [lr, beta1, beta2, eps, weight_decay] (fp32)
    and the step count, drawn per call from the shared generator (the same on every rank)."""
    import torch

    u = torch.rand(6, generator=generator, device=device, dtype=torch.float64)
    hparams = torch.stack((10 ** (-4 + u[0]), 0.85 + 0.1 * u[1], 0.95 + 0.049 * u[2], 10 ** (-8 + 2 * u[3]), 0.1 * u[4]))
    return hparams.to(torch.float32), (1 + 300 * u[5]).to(torch.int64)  # early steps, where bias correction matters


KEY_BIAS_COMPONENT = 8.0  # with_key_bias: the last coordinate of every key (exact in bf16 and fp16)
SCORE_OFFSET_RANGE = (100.0, 200.0)  # with_key_bias: per query, added to all its scaled scores (exp overflows fp32 above ~88.7)


def with_key_bias(q, k, generator):
    """Attention inputs q [..., heads, head_dim] and k [..., kv_heads, head_dim] (fp32) whose
    scaled scores q.k / sqrt(head_dim) are all raised, per query row and head, by one offset drawn
    in SCORE_OFFSET_RANGE: every key's last coordinate becomes KEY_BIAS_COMPONENT (a bias all keys
    share, as a K projection with a bias gives) and each query's last grows to match. The softmax
    is unchanged (it ignores what all of a row's scores share); an exp taken without the max
    overflows fp32."""
    import torch

    low, high = SCORE_OFFSET_RANGE
    offset = low + (high - low) * torch.rand(q.shape[:-1], generator=generator, device=q.device)
    q, k = q.clone(), k.clone()
    q[..., -1] += offset * q.shape[-1] ** 0.5 / KEY_BIAS_COMPONENT
    k[..., -1] = KEY_BIAS_COMPONENT
    return q, k


SCORE_SPREAD_RANGE = (20.0, 60.0)  # with_peaked_scores: the standard deviation of a query's scaled scores


def with_peaked_scores(q, generator):
    """Attention queries q [..., heads, head_dim] (fp32, unit normal like the keys) scaled per row
    and head so that the scaled scores, N(0, 1) before, spread with a standard deviation drawn in
    SCORE_SPREAD_RANGE (large attention logits, as models without QK normalisation grow): a
    query's scores then differ by hundreds, and its softmax is nearly one-hot. An exp stabilised
    by anything but the query's running max (none, or the max of its first block only) overflows
    fp32 where a later score exceeds that by more than ~88.7."""
    import torch

    low, high = SCORE_SPREAD_RANGE
    spread = low + (high - low) * torch.rand(q.shape[:-1], generator=generator, device=q.device)
    return q * spread.unsqueeze(-1)
