"""ZeRO stage 2 step at the end of gradient accumulation: reduce-scatter the last micro-batch's
gradients, add them to this rank's fp32 gradient shard, AdamW on the fp32 master shard,
all-gather the updated parameters in the model dtype.

Pattern from DeepSpeed ZeRO stage 2 (gradient and optimizer-state partitioning), also PyTorch
FSDP's ``SHARD_GRAD_OP`` and, for its collectives, Megatron-LM's ``DistributedOptimizer`` (which
reduces once per step rather than per micro-batch): each rank keeps only its shard of the
gradient, so after every micro-batch's backward the bf16 gradients are reduce-scattered
(averaged) and the rank's part is accumulated into an fp32 gradient partition; no rank ever
holds the full averaged gradient. This is the last micro-batch of an accumulation window: its
reduced shard is added to the partition accumulated so far, then AdamW (decoupled weight decay,
DeepSpeed's default) updates the fp32 master shard and its moments, and the updated shard is
cast to the model dtype and all-gathered. Hyper-parameters and the step count come with the
inputs and differ per call. The master shard is judged tightly, in fp32 (the update is far below
a bf16 ulp of the parameters). The traffic is that of one all-reduce split around the optimizer;
a fast version fuses the reduction, accumulation, AdamW and cast, and pipelines the
reduce-scatter, update and all-gather over chunks.
"""

from problems.authoring import adam_hparams, randn, rank_generator

from problems.contract import Cost, ProblemSpec

SPEC = ProblemSpec(
    name="zero2_reduce_scatter_step",
    category="dp",
    pattern="reduce-scatter (average) of flat gradients, fp32 accumulation and AdamW on the local shard, "
            "all-gather of the bf16 parameters",
    origin="DeepSpeed ZeRO stage 2 (gradient partitioning with fp32 accumulation); PyTorch FSDP SHARD_GRAD_OP; "
           "Megatron-LM DistributedOptimizer",
    dtype="bfloat16",
    atol=1e-8,
    rtol=2**-20,
    shapes={"default": {"numel": 2**25}, "small": {"numel": 4096}},
    description="The model has numel parameters, flattened; rank r owns shard r (elements r*numel/W..(r+1)*numel/W-1). Rank r "
                "holds its last micro-batch gradient grad ([numel], model dtype); its fp32 shards grad_acc (the averaged "
                "gradient accumulated over the earlier micro-batches), master, exp_avg, exp_avg_sq ([numel/world] each); "
                "hparams ([lr, beta1, beta2, eps, weight_decay], fp32) and step (0-d int64, t >= 1), the same on every "
                "rank. With g = grad_acc + shard r of the average over ranks of grad: m = beta1*exp_avg + (1-beta1)*g, "
                "v = beta2*exp_avg_sq + (1-beta2)*g^2, p = master*(1 - lr*weight_decay) - lr/(1-beta1^t) * m / "
                "(sqrt(v)/sqrt(1-beta2^t) + eps). Every rank returns params ([numel], model dtype: every rank's p cast to "
                "the model dtype, in rank order) and its p, m, v ([numel/world], fp32).",
)


def make_inputs(rank, world, generator, device, dtype, *, numel):
    import torch

    hparams, step = adam_hparams(generator, device)
    own = rank_generator(generator, rank)
    master_dtype = torch.promote_types(dtype, torch.float32)
    shard = numel // world
    grad = randn(numel, own, device, dtype, scale=1e-2)
    grad_acc = randn(shard, own, device, master_dtype, scale=1e-2)
    master = randn(shard, own, device, master_dtype, scale=0.02)
    exp_avg = randn(shard, own, device, master_dtype, scale=1e-3)
    exp_avg_sq = (torch.rand(shard, generator=own, device=device, dtype=torch.float32) + 0.5).mul(1e-4).to(master_dtype)
    return grad, grad_acc, master, exp_avg, exp_avg_sq, hparams, step


def cost(world, dtype_bytes, *, numel):
    size = numel * dtype_bytes
    shard = numel // world
    return Cost(comm_bytes=2 * (world - 1) / world * size, flops=numel + 18 * shard,
                hbm_bytes=size + size / world + 2 * size + 8 * shard * 4)
