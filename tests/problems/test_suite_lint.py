"""The problem suite passes the problem lint at every world size, and the lint catches planted
mistakes. Runs each reference on CPU ranks (gloo): one harness run per problem x world."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from problems import all_problems, get_problem, problem_names
from problems.loader import load_problem
from sandbox.problem_lint import LintResult, lint_problem


def _explain(result: LintResult) -> str:
    return f"{result.problem} at world {result.world}:\n" + "\n".join(f"  {c.name}: {c.message}" for c in result.failures)


@pytest.mark.parametrize(("name", "world"), [(name, world) for name in problem_names() for world in get_problem(name).spec.world_sizes])
def test_problem_passes_lint(name: str, world: int) -> None:
    result = lint_problem(get_problem(name), world)
    assert result.ok, _explain(result)
    assert {c.name for c in result.checks} >= {"reference_runs", "outputs_seed_dependent", "outputs_depend_on_inputs",
                                                "rerun_passes", "detects_element_error", "detects_scale_error"}


def test_suite_has_the_first_twelve() -> None:
    assert set(problem_names()) >= {
        "all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all", "gemm_all_reduce", "all_gather_gemm",
        "gemm_reduce_scatter", "ulysses_all_to_all", "ring_attention", "moe_dispatch_combine", "vocab_parallel_cross_entropy"}


# ---------------------------------------------------------------------- planted mistakes

GOOD_PROBLEM = '''
from problems.authoring import randn, rank_generator
from problems.contract import Cost, ProblemSpec

SPEC = ProblemSpec(name="{name}", category="collective", pattern="all-reduce", origin="a test", atol={atol}, rtol=2**-8,
                   shapes={{"default": {{"numel": 1024}}, "small": {{"numel": 512}}}})


def make_inputs(rank, world, generator, device, dtype, *, numel):
    own = rank_generator(generator, rank)
    return randn(numel, own, device, dtype), randn(numel, own, device, dtype)


def cost(world, dtype_bytes, *, numel):
    return Cost(comm_bytes=2 * numel * dtype_bytes, hbm_bytes=3 * numel * dtype_bytes)
'''

GOOD_REFERENCE = '''
import torch
import torch.distributed as dist


def solution(x, y):
    out = x * y
    dist.all_reduce(out)
    return out
'''

PLANTED = {
    # name: (what to change, the checks that must fail)
    "constant_output": ({"reference": GOOD_REFERENCE.replace("out = x * y", "out = torch.ones_like(x)")},
                        {"outputs_nonconstant", "outputs_seed_dependent", "outputs_depend_on_inputs"}),
    "zero_output": ({"reference": GOOD_REFERENCE.replace("out = x * y", "out = (x * y).zero_()")},
                    {"outputs_nonconstant", "detects_element_error"}),
    "seed_independent": ({"problem": GOOD_PROBLEM.replace("own = rank_generator(generator, rank)",
                                                          "import torch; own = torch.Generator(device=device); own.manual_seed(rank)")},
                         {"inputs_seed_dependent", "outputs_seed_dependent"}),
    "same_on_every_rank": ({"problem": GOOD_PROBLEM.replace("own = rank_generator(generator, rank)", "own = generator")},
                           {"inputs_differ_across_ranks"}),
    "unused_input": ({"reference": GOOD_REFERENCE.replace("out = x * y", "out = x.clone()")}, {"outputs_depend_on_inputs"}),
    "loose_tolerance": ({"atol": "0.5"}, {"detects_element_error", "detects_scale_error"}),
    "crashing_reference": ({"reference": GOOD_REFERENCE.replace("out = x * y", "out = x @ y.view(2, -1)")}, {"reference_runs"}),
    # input regimes (ProblemSpec.regimes): each must draw, and draw something of its own
    "regime_not_accepted": ({"problem": GOOD_PROBLEM.replace("rtol=2**-8,", "rtol=2**-8, regimes=2,")}, {"inputs_regimes"}),
    "regime_ignored": ({"problem": GOOD_PROBLEM.replace("rtol=2**-8,", "rtol=2**-8, regimes=2,").replace(
        "*, numel):", "*, numel, regime=0):")}, {"inputs_regimes"}),
    # ... and each is judged as regime 0 is: finite outputs, tolerances that catch errors
    "regime_overflows": ({"problem": GOOD_PROBLEM.replace("rtol=2**-8,", "rtol=2**-8, regimes=2,").replace(
        "*, numel):", "*, numel, regime=0):").replace(
        "randn(numel, own, device, dtype)", "randn(numel, own, device, dtype, scale=1e20**regime)")}, {"outputs_finite"}),
    "regime_loose_tolerance": ({"problem": GOOD_PROBLEM.replace("rtol=2**-8,", "rtol=2**-8, regimes=2,").replace(
        "*, numel):", "*, numel, regime=0):").replace(
        "return randn(numel, own, device, dtype), randn(numel, own, device, dtype)",
        "return randn(numel, own, device, dtype), randn(numel, own, device, dtype, scale=1e7**regime)"),
        "reference": GOOD_REFERENCE.replace("out = x * y", "out = (x + y) - y")},  # cancels: fp32 keeps ~1 of x at |y| ~ 1e7
        {"detects_element_error", "detects_scale_error"}),
    # a sum-of-products declaration the reference breaks (a difference): the judge's rounding bound would not hold
    "sum_of_products_false": ({"problem": GOOD_PROBLEM.replace("rtol=2**-8,", "rtol=2**-8, sum_of_products=True,"),
                               "reference": GOOD_REFERENCE.replace("out = x * y", "out = x - y")}, {"sum_of_products_holds"}),
}


def _write_problem(root: Path, name: str, problem: str = GOOD_PROBLEM, reference: str = GOOD_REFERENCE, atol: str = "1e-3",
                   folder_name: str | None = None):
    folder = root / "collective" / (folder_name or name)
    folder.mkdir(parents=True)
    (folder / "problem.py").write_text(textwrap.dedent(problem.format(name=name, atol=atol) if "{name}" in problem else problem))
    (folder / "reference.py").write_text(reference)
    return load_problem(folder)


def test_planted_good_problem_passes(tmp_path: Path) -> None:
    result = lint_problem(_write_problem(tmp_path, "planted_good"), 2)
    assert result.ok, _explain(result)


@pytest.mark.parametrize("case", sorted(PLANTED))
def test_lint_catches_planted_mistake(tmp_path: Path, case: str) -> None:
    change, must_fail = PLANTED[case]
    problem_text = change.get("problem", GOOD_PROBLEM)
    problem = _write_problem(tmp_path, f"planted_{case}", problem=problem_text, reference=change.get("reference", GOOD_REFERENCE),
                             atol=change.get("atol", "1e-3"))
    result = lint_problem(problem, 2)
    failed = {c.name for c in result.failures}
    assert not result.ok
    assert must_fail <= failed, f"expected {sorted(must_fail)} to fail; failed: {sorted(failed)}\n{_explain(result)}"
    assert all(c.message for c in result.failures), "every failed check says why"


def test_a_problem_with_two_regimes_passes(tmp_path: Path) -> None:
    two = GOOD_PROBLEM.replace("rtol=2**-8,", "rtol=2**-8, regimes=2,").replace("*, numel):", "*, numel, regime=0):").replace(
        "return randn(numel, own, device, dtype), randn(numel, own, device, dtype)",
        "return randn(numel, own, device, dtype, scale=1 + 99 * regime), randn(numel, own, device, dtype)")
    result = lint_problem(_write_problem(tmp_path, "planted_regimes", problem=two), 2)
    assert result.ok and "inputs_regimes" in {c.name for c in result.checks}, _explain(result)


def test_a_sum_of_products_problem_passes(tmp_path: Path) -> None:
    declared = GOOD_PROBLEM.replace("rtol=2**-8,", "rtol=2**-8, sum_of_products=True,")
    result = lint_problem(_write_problem(tmp_path, "planted_products", problem=declared), 2)
    assert result.ok and "sum_of_products_holds" in {c.name for c in result.checks}, _explain(result)


def test_lint_catches_misplaced_problem(tmp_path: Path) -> None:
    problem = _write_problem(tmp_path, "planted_named", folder_name="planted_elsewhere")
    result = lint_problem(problem, 3)
    assert {"names", "world_and_size"} <= {c.name for c in result.failures}
    assert not any(c.name == "reference_runs" for c in result.checks), "a problem with a broken spec is not run"


# ---------------------------------------------------------------------- the command


def test_cli_problems_check(monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    from agent.cli import app

    runner = CliRunner()
    passed = runner.invoke(app, ["problems", "--check", "all_reduce", "--world", "2"])
    assert passed.exit_code == 0, passed.output
    assert "all_reduce" in passed.output and "1 of 1" in passed.output

    def failing(problem, world, **_):
        result = LintResult(problem=problem.name, world=world, size="small")
        result.add("outputs_nonconstant", ["rank 0 output 0 is all zero"])
        return result

    monkeypatch.setattr("sandbox.problem_lint.lint_problem", failing)
    failed = runner.invoke(app, ["problems", "--check", "broadcast", "all_to_all"])
    assert failed.exit_code == 1, failed.output
    assert "FAIL" in failed.output and "0 of 6" in failed.output

    unknown = runner.invoke(app, ["problems", "--check", "all_reduce", "--world", "3"])
    assert unknown.exit_code != 0


def test_kloop_problems_shows_each_problems_roofline():
    import json
    import subprocess
    import sys

    listed = subprocess.run([sys.executable, "-m", "agent", "problems", "--json", "--gpu", "H200"], capture_output=True, text=True, timeout=120)
    assert listed.returncode == 0, listed.stderr
    rows = json.loads(listed.stdout)
    assert len(rows) == len(all_problems())
    for row in rows:
        bound = row["roofline_ms"]
        assert bound["ms"] > 0 and bound["limiter"] in ("interconnect", "hbm", "compute") and bound["world"] == max(row["world_sizes"])
    refused = subprocess.run([sys.executable, "-m", "agent", "problems", "--gpu", "X80"], capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2 and "no datasheet" in refused.stderr and "Traceback" not in refused.stderr


def test_suite_covers_the_taxonomy() -> None:
    names = set(problem_names())
    assert names >= {
        "pp_send_recv_activations", "pp_1f1b_microbatches", "pp_interleaved_virtual_stages", "pp_tp_boundary_all_gather",
        "fp8_all_gather_params", "int8_quantized_all_reduce", "fp8_reduce_scatter_grads", "fp8_all_to_all_dispatch",
        "distributed_fft_transpose", "gnn_feature_exchange", "distributed_sample_sort", "distributed_knn",
        "contrastive_loss_all_gather"}
    categories = [get_problem(name).spec.category for name in names]
    assert len(names) >= 48
    assert all(categories.count(c) >= 3 for c in ("collective", "tp", "sp", "cp", "ep", "dp", "fsdp", "pp", "lowprec", "domain"))


def test_lint_moves_float8_elements_and_scales_them_visibly() -> None:
    import torch

    from sandbox.problem_lint import _moved_element

    codes = torch.tensor([448.0, -3.0, 0.5, 12.0]).to(torch.float8_e4m3fn)  # 448 saturates: the move goes inward
    moved = _moved_element(torch, codes)
    assert moved.dtype == codes.dtype and int((moved.float() != codes.float()).sum()) == 1
    ints = torch.tensor([5, -100, 7])
    assert (_moved_element(torch, ints) - ints).abs().sum() == 5
