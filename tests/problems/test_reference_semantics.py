"""Each reference computes what its problem's description says: the reference, run by the harness
on CPU ranks in fp64, against a single-process oracle written from the description and fed every
rank's inputs. The lint (test_suite_lint.py) checks that a problem can judge; this checks what it
judges. World 4, so that ranks with two neighbours and middle zigzag chunks exist."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from problems import get_problem

WORLD = 4
SEEDS = (3, 4)


def _blocks(tensor, world, rank, dim=0):
    return tensor.chunk(world, dim=dim)[rank]


def sp_layernorm_all_gather(inputs, rank, world):
    x = torch.cat([i[0] for i in inputs])
    _, ln_weight, ln_bias, _ = inputs[0]
    return [F.layer_norm(x, x.shape[-1:], ln_weight, ln_bias, 1e-5) @ inputs[rank][3]]


def sp_reduce_scatter_residual(inputs, rank, world):
    total = sum(i[0] for i in inputs)
    h = _blocks(total, world, rank) + inputs[0][1] + inputs[rank][2]
    return [h, h / torch.sqrt(h.square().mean(-1, keepdim=True) + 1e-6) * inputs[0][3]]


def sp_embedding_reduce_scatter(inputs, rank, world):
    table, tokens = torch.cat([i[0] for i in inputs]), inputs[0][1]
    return [_blocks(table[tokens].transpose(0, 1), world, rank)]


def sp_column_parallel_backward(inputs, rank, world):
    x = torch.cat([i[0] for i in inputs]).requires_grad_()
    weights = [i[1].clone().requires_grad_() for i in inputs]
    with torch.enable_grad():
        loss = sum((x @ w.t() * i[2]).sum() for w, i in zip(weights, inputs))  # each rank's output columns, dotted with dy
        loss.backward()
    return [_blocks(x.grad, world, rank), weights[rank].grad]


def cp_halo_exchange(inputs, rank, world):
    x = torch.cat([i[0] for i in inputs], dim=1)
    _, weight, bias = inputs[0]
    out = F.conv1d(x.transpose(1, 2), weight.unsqueeze(1), bias, padding=weight.shape[1] // 2, groups=weight.shape[0])
    return [_blocks(out.transpose(1, 2), world, rank, dim=1)]


def cp_all_gather_kv_attention(inputs, rank, world):
    chunk = inputs[0][0].shape[0] // 2
    chunks = [None] * (2 * world)
    for j, held in enumerate(inputs):
        chunks[j], chunks[2 * world - 1 - j] = [t[:chunk] for t in held], [t[chunk:] for t in held]
    q, k, v = (torch.cat([c[m] for c in chunks]) for m in range(3))
    kv_head = torch.arange(q.shape[1]) // (q.shape[1] // k.shape[1])
    scores = torch.einsum("qhd,khd->hqk", q, k[:, kv_head]) / q.shape[-1] ** 0.5
    scores = scores.masked_fill(torch.ones(scores.shape[-2:], dtype=torch.bool).triu(1), float("-inf"))
    out = torch.einsum("hqk,khd->qhd", scores.softmax(-1), v[:, kv_head]).chunk(2 * world)
    return [torch.cat((out[rank], out[2 * world - 1 - rank]))]


def ulysses_heads_to_sequence(inputs, rank, world):
    attn = _blocks(torch.cat([i[0] for i in inputs], dim=1), world, rank)
    return [attn.reshape(attn.shape[0], -1) @ inputs[0][1]]


def vocab_parallel_embedding(inputs, rank, world):
    return [torch.cat([i[0] for i in inputs])[inputs[0][1]]]


def tp_mlp_block(inputs, rank, world):
    x, ffn = inputs[0][0], inputs[0][2].shape[0]
    gate = torch.cat([i[1][:, :ffn] for i in inputs], dim=1)
    up = torch.cat([i[1][:, ffn:] for i in inputs], dim=1)
    down = torch.cat([i[2] for i in inputs])
    return [(F.silu(x @ gate) * (x @ up)) @ down]


def all_gather_variable(inputs, rank, world):
    assert [i[0].shape[0] for i in inputs] == inputs[0][1].tolist()
    return [torch.cat([i[0] for i in inputs])]


def scatter_from_root(inputs, rank, world):
    return [_blocks(inputs[0][0], world, rank)]


ORACLES = {f.__name__: f for f in (
    sp_layernorm_all_gather, sp_reduce_scatter_residual, sp_embedding_reduce_scatter, sp_column_parallel_backward,
    cp_halo_exchange, cp_all_gather_kv_attention, ulysses_heads_to_sequence, vocab_parallel_embedding, tp_mlp_block,
    all_gather_variable, scatter_from_root)}


@pytest.mark.parametrize("name", sorted(ORACLES))
def test_reference_matches_its_description(name: str) -> None:
    from sandbox.harness.reference_outputs import run_reference

    problem = get_problem(name)
    cases = [(seed, regime) for regime in range(problem.spec.regimes) for seed in SEEDS]  # every input regime
    outputs = run_reference(problem, WORLD, seeds=tuple(seed for seed, _ in cases), size="small", dtype="float64",
                            include_native=False, regimes=tuple(regime for _, regime in cases))
    for trial, (seed, regime) in enumerate(cases):
        generator = torch.Generator()
        inputs = [problem.inputs(rank, WORLD, generator.manual_seed(seed), torch.device("cpu"), torch.float64, problem.shape("small"),
                                 regime) for rank in range(WORLD)]
        for rank in range(WORLD):
            got, want = outputs[rank][trial].expected, ORACLES[name](inputs, rank, WORLD)
            assert len(got) == len(want), f"{name} rank {rank}: {len(got)} outputs, the description has {len(want)}"
            for index, (g, w) in enumerate(zip(got, want)):
                assert tuple(g.shape) == tuple(w.shape), f"{name} rank {rank} output {index}: {tuple(g.shape)} vs {tuple(w.shape)}"
                error = float((g.double() - w.double()).abs().max()) / max(float(w.abs().max()), 1e-300)
                assert error < 1e-10, f"{name} rank {rank} output {index}, seed {seed}, regime {regime}: relative error {error:.3g}"
