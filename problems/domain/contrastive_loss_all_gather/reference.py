import torch
import torch.distributed as dist
import torch.nn.functional as F


@torch.no_grad()
def solution(image: torch.Tensor, text: torch.Tensor, logit_scale: torch.Tensor) -> torch.Tensor:
    """Per-pair CLIP loss of this rank's pairs against the global batch: returns [batch] fp32,
    0.5 * (image-to-text CE + text-to-image CE)."""
    rank, world = dist.get_rank(), dist.get_world_size()
    batch = image.shape[0]
    acc = torch.promote_types(image.dtype, torch.float32)

    all_image = image.new_empty((world * batch, image.shape[1]))
    all_text = text.new_empty((world * batch, text.shape[1]))
    dist.all_gather_into_tensor(all_image, image.contiguous())
    dist.all_gather_into_tensor(all_text, text.contiguous())

    scale = logit_scale.to(acc)
    logits_per_image = scale * image.to(acc) @ all_text.to(acc).t()  # [batch, world * batch]
    logits_per_text = scale * text.to(acc) @ all_image.to(acc).t()
    labels = torch.arange(batch, device=image.device) + rank * batch
    return 0.5 * (F.cross_entropy(logits_per_image, labels, reduction="none")
                  + F.cross_entropy(logits_per_text, labels, reduction="none"))
