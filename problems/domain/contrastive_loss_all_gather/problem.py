"""CLIP contrastive loss over the global batch: all-gather the embeddings, the local rows of the logits, cross-entropy.

Pattern from OpenCLIP's ``ClipLoss`` with ``local_loss=True`` (also in SigLIP-style trainers and
in SAM/CLIP-style multimodal pre-training): each rank encodes b images and their b captions; the
InfoNCE loss needs every image scored against every caption of the global batch, so the
embeddings of both towers are all-gathered. With the local-loss option a rank only computes its
own rows: ``logit_scale * img_local @ text_all^T`` and ``logit_scale * text_local @ img_all^T``
([b, W*b] each), whose targets are the matching pairs, columns rank*b + i. Every rank returns
the per-sample loss, the mean of the image-to-text and text-to-image cross-entropies of its b
pairs (OpenCLIP's loss is the mean of this vector). As a careful implementation does, the logits
and the softmax are computed in fp32 from the bf16 embeddings. The [b, W*b] logit matrices are
the big intermediate (hundreds of MB at a 32k global batch): a fast version fuses the GEMM with
an online log-sum-exp and never writes them, and overlaps the all-gather with the GEMM on the
blocks that have already arrived.
"""

from problems.authoring import rank_generator

from problems.contract import Cost, ProblemSpec

SPEC = ProblemSpec(
    name="contrastive_loss_all_gather",
    category="domain",
    pattern="all-gather of both towers' embeddings, local rows of the logit GEMMs, cross-entropy",
    origin="OpenCLIP ClipLoss (gather_with_grad, local_loss=True); CLIP / SigLIP-style contrastive pre-training",
    dtype="bfloat16",
    atol=1e-3,
    rtol=1e-4,
    shapes={"default": {"batch": 4096, "dim": 1024}, "small": {"batch": 16, "dim": 32}},
    description="Rank r holds image ([batch, dim]) and text ([batch, dim]) embeddings (unit rows) of its batch of pairs, and "
                "logit_scale (a 0-d fp32 tensor, the same on every rank). With I, T the embeddings of all ranks stacked in "
                "rank order, rank r returns, for its pairs i, 0.5 * (CE(s * image_i @ T^T, r*batch + i) + CE(s * text_i @ I^T, "
                "r*batch + i)) computed in fp32, shape [batch], float32.",
)


def make_inputs(rank, world, generator, device, dtype, *, batch, dim):
    import torch

    own = rank_generator(generator, rank)
    image = torch.randn((batch, dim), generator=own, device=device)
    # captions resemble their own image: the loss is far from its chance value log(world * batch)
    text = image + 1.5 * torch.randn((batch, dim), generator=own, device=device)
    image = torch.nn.functional.normalize(image, dim=-1).to(dtype)
    text = torch.nn.functional.normalize(text, dim=-1).to(dtype)
    # shared: the learned temperature, exp(t) with t in [log 10, log 100] (OpenCLIP clamps it at 100)
    logit_scale = torch.exp(torch.empty((), device=device).uniform_(2.303, 4.605, generator=generator))
    return image, text, logit_scale


def cost(world, dtype_bytes, *, batch, dim):
    local = batch * dim * dtype_bytes
    columns = world * batch
    return Cost(comm_bytes=2 * (world - 1) * local, flops=2 * 2 * batch * columns * dim + 2 * 5 * batch * columns,
                hbm_bytes=2 * world * local + 2 * local + 4 * batch)
