"""The harness on ParallelKernelBench-style inputs: lists of tensors, plain values and None,
modules, process groups made by the input generator, all crossing to the candidate as data; the
mutation check and the upcast for the reference's high-precision run reach inside them. Also:
what candidates of PKB problems can see."""

from pathlib import Path

import pytest
import torch

from problems import find_problem
from sandbox.evaluate import evaluate_in
from sandbox.harness.config import HarnessConfig
from sandbox.harness.confine import landlock_abi
from sandbox.harness.trees import nearly_constant
from sandbox.rank.server import flatten_outputs
from kloop_runtime.pkb_shim.utils.cuda_helpers import compile_cuda_extension, needs_cuda
from tests.fixtures.candidates import source


def evaluate(box, root: Path, ident: str, code: str, world: int = 2):
    problem = find_problem(ident, root)
    config = HarnessConfig(problem=problem.name, problem_ref=problem.ref, world=world, device="cpu", allow_nccl=True, timed=False, trials=3)
    return evaluate_in(box, code, config)


@pytest.mark.parametrize("ident, candidate, world", [
    ("pkb:21", "pkb_grad_norm_clip", 2),  # a list of tensors, floats and None; nested outputs
    ("pkb:31", "pkb_linear_allreduce", 2),  # an nn.Linear: upcast as a copy for the reference
    ("pkb:55", "pkb_pair_sum", 4),  # process groups made inside the input generator
    ("pkb:7", "pkb_reducescatter", 4),
])
def test_pkb_style_inputs_are_handled(local_sandbox, pkb_root, ident, candidate, world):
    report = evaluate(local_sandbox, pkb_root, ident, source(candidate), world)
    assert report.status == "correct", report.model_dump_json(indent=1)[-3000:]
    assert len(report.ranks) == world and not report.notes  # random inputs: no weak-check note


def test_writing_into_a_tensor_inside_a_list_is_caught(local_sandbox, pkb_root):
    report = evaluate(local_sandbox, pkb_root, "pkb:21", source("pkb_grad_norm_clip_in_place"))
    assert report.status == "wrong" and report.mismatch.kind == "input_modified"
    assert "changed its input tensor 0 during call" in report.message


@pytest.mark.skipif(landlock_abi() < 1, reason="the kernel has no Landlock")
def test_candidates_get_the_shim_and_cannot_read_the_checkout(local_sandbox, pkb_root):
    code = source("pkb_allreduce_looks_around").replace("CHECKOUT_FILE_PLACEHOLDER", str(pkb_root / "reference" / "1_allreduce.py"))
    report = evaluate(local_sandbox, pkb_root, "pkb:1", code)
    assert report.status == "correct", report.model_dump_json(indent=1)[-3000:]


# ---------------------------------------------------------------------------- trees
def test_outputs_flatten_lists_dicts_and_numbers():
    a, b = torch.ones(2), torch.zeros(3)
    leaves = flatten_outputs(torch, ([a, {"z": b, "y": 2.5}], None, 7))
    assert len(leaves) == 4 and leaves[0] is a and leaves[1].item() == 2.5 and leaves[2] is b and leaves[3].item() == 7


def test_nearly_constant_inputs_are_told_apart_from_random_ones():
    assert nearly_constant((torch.full((64, 64), 3.0),))
    assert nearly_constant(([torch.full((32, 32), 1.0), torch.full((32, 32), 2.0)], 4))
    assert not nearly_constant((torch.randn(64, 64),))
    assert not nearly_constant((torch.full((64, 64), 3.0), torch.randn(64, 64)))
    assert not nearly_constant((torch.full((4,), 1.0), 3))  # too small to tell


# ---------------------------------------------------------------------------- the shim
def test_the_shim_tells_cuda_from_plain_cpp():
    assert not needs_cuda('#include <torch/extension.h>\ntorch::Tensor f(torch::Tensor x) { return x; }')
    assert needs_cuda("__global__ void k(float* x) {}")
    assert needs_cuda("#include <cuda_runtime.h>\n")
    assert needs_cuda("k<<<1, 1>>>(x);")


@pytest.mark.skipif(torch.version.cuda is not None, reason="this torch has CUDA")
def test_cuda_sources_fail_clearly_without_a_cuda_torch():
    from kloop_runtime import CompileError

    with pytest.raises(CompileError, match="has no CUDA, and the source uses CUDA"):
        compile_cuda_extension("k", "__global__ void k(float* x) { x[0] = 1; }")
