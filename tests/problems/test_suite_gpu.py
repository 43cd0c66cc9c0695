"""Every problem through the GPU path in emulation (marker ``gpu``): its own reference, wrapped as
a candidate, passes; the same with a perturbed output fails.

The wrapper runs the reference on CPU copies of the inputs (gloo has few collectives for CUDA
tensors) and returns its outputs on the GPU, so inputs, outputs, comparison and every check go
through the same GPU path a real candidate's do.
"""

import pytest

from problems import all_problems
from sandbox.evaluate import evaluate_in
from sandbox.harness.config import HarnessConfig

pytestmark = pytest.mark.gpu

WRAPPER = '''

def _to(value, device):
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, (list, tuple)):
        return type(value)(_to(v, device) for v in value)
    return value


def _perturb(value):
    if isinstance(value, torch.Tensor):
        if value.is_floating_point():
            wide = value.float()  # CUDA implements little arithmetic on float8
            scale = 1.5 if value.element_size() == 1 else 1.05  # float8 values are 6-25% apart
            return (wide * scale + 0.01 * wide.abs().max()).to(value.dtype)
        out = value.clone()
        out.view(-1)[0] += 1
        return out
    if isinstance(value, (list, tuple)):
        return type(value)([_perturb(value[0]), *value[1:]])
    return value


def solution(*inputs):
    device = next(x.device for x in inputs if isinstance(x, torch.Tensor))
    out = _to(_reference(*_to(inputs, "cpu")), device)
    return _perturb(out) if PERTURB else out
'''


def wrapped(problem, perturb: bool) -> str:
    source = problem.reference_source.replace("def solution(", "def _reference(")
    return "import torch\n" + source + f"\nPERTURB = {perturb}\n" + WRAPPER


@pytest.mark.parametrize("problem", all_problems(), ids=lambda p: p.name)
def test_reference_as_candidate_passes_and_a_perturbed_one_fails(local_sandbox, problem):
    world = 2 if 2 in problem.spec.world_sizes else min(problem.spec.world_sizes)
    config = HarnessConfig(problem=problem.name, world=world, device="emulate", allow_nccl=True, trials=3)
    good = evaluate_in(local_sandbox, wrapped(problem, False), config)
    bad = evaluate_in(local_sandbox, wrapped(problem, True), config)
    print(f"\nPROBLEM {problem.name:<32} {problem.spec.category:<10} world {world}  reference-as-candidate: {good.status:<8} "
          f"perturbed: {bad.status:<8} ({good.wall_s:.1f} s, {bad.wall_s:.1f} s)")
    assert good.status == "correct", good.message
    assert bad.status == "wrong", bad.message
