"""ZeRO stage 1 optimizer step: all-reduce the gradients, Adam on this rank's shard of the fp32
master parameters, all-gather the updated parameters in the model dtype.

Pattern from DeepSpeed ZeRO stage 1 (optimizer-state partitioning) and PyTorch's
``ZeroRedundancyOptimizer`` running under ``DistributedDataParallel``: the bf16 model and its
gradients are replicated, but the fp32 master copy of the parameters and Adam's two moments are
split into W contiguous shards of the flat parameter vector, one per rank. After backward the
gradients are averaged over the ranks with an all-reduce, so every rank keeps the full averaged
gradient, as plain data parallelism does; each rank then runs Adam (with L2 weight decay folded
into the gradient, as ``torch.optim.Adam`` does) on its shard only, casts the updated shard to
the model dtype and all-gathers it so every rank has the whole updated model. The
hyper-parameters (a learning rate from a schedule, betas, eps, weight decay) and the step count
come with the inputs and differ per call. The master shard is judged tightly, in fp32: the Adam
update is far smaller than a bf16 ulp of the parameters, so the bf16 copy alone would not show a
wrong update. A fast version fuses the gradient slice, the Adam math and the cast into one pass,
and overlaps the all-gather of early chunks with the update of later ones.
"""

from problems.authoring import adam_hparams, randn, rank_generator

from problems.contract import Cost, ProblemSpec

SPEC = ProblemSpec(
    name="zero1_optimizer_step",
    category="dp",
    pattern="all-reduce (average) of flat gradients, Adam on the local fp32 shard, all-gather of the bf16 parameters",
    origin="DeepSpeed ZeRO stage 1 (optimizer-state partitioning); PyTorch ZeroRedundancyOptimizer under DDP",
    dtype="bfloat16",
    atol=1e-8,
    rtol=2**-20,
    shapes={"default": {"numel": 2**25}, "small": {"numel": 4096}},
    description="The model has numel parameters, flattened; rank r owns shard r (elements r*numel/W..(r+1)*numel/W-1). Rank r "
                "holds its full local gradient grad ([numel], model dtype), its fp32 shards master, exp_avg, exp_avg_sq "
                "([numel/world] each), hparams ([lr, beta1, beta2, eps, weight_decay], fp32) and step (0-d int64, t >= 1), "
                "the same on every rank. With g = the average over ranks of grad, shard r of it (in fp32) plus "
                "weight_decay * master: m = beta1*exp_avg + (1-beta1)*g, v = beta2*exp_avg_sq + (1-beta2)*g^2, "
                "p = master - lr/(1-beta1^t) * m / (sqrt(v)/sqrt(1-beta2^t) + eps). Every rank returns params ([numel], "
                "model dtype: every rank's p cast to the model dtype, in rank order), the averaged gradient ([numel], "
                "model dtype), and its p, m, v ([numel/world], fp32).",
)


def make_inputs(rank, world, generator, device, dtype, *, numel):
    import torch

    hparams, step = adam_hparams(generator, device)
    own = rank_generator(generator, rank)
    master_dtype = torch.promote_types(dtype, torch.float32)
    shard = numel // world
    grad = randn(numel, own, device, dtype, scale=1e-2)
    master = randn(shard, own, device, master_dtype, scale=0.02)
    exp_avg = randn(shard, own, device, master_dtype, scale=1e-3)
    exp_avg_sq = (torch.rand(shard, generator=own, device=device, dtype=torch.float32) + 0.5).mul(1e-5).to(master_dtype)
    return grad, master, exp_avg, exp_avg_sq, hparams, step


def cost(world, dtype_bytes, *, numel):
    size = numel * dtype_bytes
    shard = numel // world
    return Cost(comm_bytes=3 * (world - 1) / world * size, flops=numel + 16 * shard,
                hbm_bytes=(world + 1) * size + size + 7 * shard * 4)
