"""Prompt snapshots: what the model is shown, rendered with a fixed fake topology so that the
files do not depend on the machine.

A template change that alters a prompt fails here with a diff. When the change is meant,
regenerate the snapshots and review them with ``git diff tests/fixtures/golden``:

    KLOOP_UPDATE_GOLDEN=1 python -m pytest tests/agent/test_prompts.py
"""

import difflib
import os
from pathlib import Path

import pytest

from agent.budget import Budget, Spend
from agent.loop import Agent, BestSolution
from agent.prompting import cheat_sheet, feedback_prompt, system_prompt, task_prompt
from agent.providers import make_model
from agent.run_config import RunConfig
from agent.trajectory import Trajectory
from problems import get_problem
from sandbox.harness.config import HarnessConfig
from sandbox.report import EvalReport
from sandbox.topology import with_measurement
from tests.support.prompt_fixtures import correct_report, example_solutions, fake_datasheet_topology, fake_measurement, fake_topology

GOLDEN = Path(__file__).resolve().parents[1] / "fixtures" / "golden"
UPDATE = os.environ.get("KLOOP_UPDATE_GOLDEN") == "1"


def check_golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if UPDATE:
        path.parent.mkdir(exist_ok=True)
        path.write_text(text)
        return
    if not path.exists():
        pytest.fail(f"no snapshot {path}; create it with KLOOP_UPDATE_GOLDEN=1 python -m pytest tests/agent/test_prompts.py")
    expected = path.read_text()
    if text != expected:
        diff = "".join(difflib.unified_diff(expected.splitlines(keepends=True), text.splitlines(keepends=True),
                                            fromfile=f"tests/fixtures/golden/{name} (snapshot)", tofile=f"{name} (rendered now)"))
        pytest.fail(f"the rendered prompt differs from tests/fixtures/golden/{name}:\n{diff}\nIf the change is intended, regenerate with "
                    f"KLOOP_UPDATE_GOLDEN=1 python -m pytest tests/agent/test_prompts.py and review `git diff tests/fixtures/golden`.",
                    pytrace=False)


def cuda_config(world: int = 8) -> HarnessConfig:
    return HarnessConfig(problem="all_reduce", world=world, device="cuda")


def first_prompt(cheat_sheet_on: bool, examples: list) -> str:
    task = task_prompt(get_problem("all_reduce"), cuda_config(), steps=10, cheat_sheet_on=cheat_sheet_on, examples=examples,
                       hardware=fake_topology())
    return f"=== system ===\n{system_prompt()}=== user ===\n{task}"


def test_task_prompt_with_cheat_sheet_and_examples_matches_snapshot():
    check_golden("task_all_reduce_w8_full.md", first_prompt(cheat_sheet_on=True, examples=example_solutions()))


def test_zero_shot_task_prompt_matches_snapshot():
    check_golden("task_all_reduce_w8_zero_shot.md", first_prompt(cheat_sheet_on=False, examples=[]))


def test_correct_feedback_with_profile_matches_snapshot():
    text = feedback_prompt(correct_report(), step=3, budget=Budget(steps=10), spend=Spend(steps=3), best=BestSolution(step=2, speedup=0.5, status="correct", source=""))
    check_golden("feedback_correct_w8.md", text)


def test_cheat_sheet_from_datasheet_matches_snapshot():
    check_golden("cheat_sheet_datasheet.md", cheat_sheet(fake_datasheet_topology()))


def test_zero_shot_prompt_has_no_cheat_sheet_or_examples():
    full, zero = first_prompt(True, example_solutions()), first_prompt(False, [])
    assert "Multi-GPU kernel cheat sheet" in full and "## Example:" in full
    assert "Multi-GPU kernel cheat sheet" not in zero and "## Example:" not in zero


def test_cheat_sheet_shows_measured_rates_and_never_recommends_multicast():
    sheet = cheat_sheet(fake_topology())
    assert "Measured on this host" in sheet and "| 363 GB/s |" in sheet and "366 GB/s per GPU" in sheet
    assert "multimem" not in sheet.lower() and "nvls" not in sheet.lower()
    assert [line for line in sheet.splitlines() if "multicast" in line.lower()] == [
        "- No NCCL, no torch.distributed collectives, no `torch.ops.symm_mem`, no NVLink multicast (switched off on these machines)."]


def test_cheat_sheet_on_a_one_gpu_host_says_no_pair_was_measured():
    one = fake_measurement().model_copy(update={"gpus": fake_measurement().gpus[:1], "pairs": [], "sm_write_gbps_by_blocks": {},
                                                "all_peers_write_gbps": None})
    hardware = with_measurement(fake_datasheet_topology(1), one)
    assert hardware.hbm_measured and not hardware.link_measured and hardware.link_gbps == 450.0
    sheet = cheat_sheet(hardware)
    assert "one GPU visible: no peer to measure" in sheet and "450 GB/s (datasheet)" in sheet and "copy engine (`buf" not in sheet


def test_cpu_prompt_has_no_cheat_sheet_even_when_asked():
    config = HarnessConfig(problem="all_reduce", world=2, device="cpu")
    text = task_prompt(get_problem("all_reduce"), config, steps=3, cheat_sheet_on=True, hardware=fake_topology())
    assert "cheat sheet" not in text and "This run is on CPU" in text


@pytest.mark.parametrize("cheat_sheet_on", [True, False])
def test_run_config_switches_the_cheat_sheet(tmp_path, cheat_sheet_on):
    harness = HarnessConfig(problem="all_reduce", world=4, device="emulate")
    config = RunConfig(problem="all_reduce", model="scripted:demo", harness=harness, mode="single", cheat_sheet=cheat_sheet_on)

    def evaluate(source: str, step: int) -> EvalReport:
        return EvalReport(status="wrong", message="not run", problem="all_reduce", world=4, device="emulate", dtype="bfloat16", size="small")

    agent = Agent(make_model("scripted:demo"), get_problem("all_reduce"), config, evaluate, Trajectory(tmp_path, info={}),
                  task_context={"hardware": fake_topology(4)})
    agent.run()
    task = agent.messages[1].content
    assert ("Multi-GPU kernel cheat sheet" in task) is cheat_sheet_on
    assert "Emulation: all 4 ranks share one NVIDIA H200" in task


def test_examples_are_other_problems_oracles_chosen_by_pattern():
    from agent.prompting import oracle_examples
    from problems import all_problems, get_problem

    for problem in all_problems():
        titles = [example["title"].split()[0] for example in oracle_examples(problem)]
        assert problem.name not in titles  # never the answer itself
    assert oracle_examples(get_problem("reduce_scatter"))[0]["title"].startswith("all_reduce")
    assert oracle_examples(get_problem("gemm_all_reduce"))[0]["title"].startswith("gemm_reduce_scatter")


def test_the_rules_in_the_prompt_are_the_rules_the_judge_enforces():
    """The lists the judge enforces reach the prompt from the code; the examples of collectives
    the rules name by hand are ones the static checks refuse."""
    import re

    from kloop_runtime.build import NVCC_OPTIONS_ALLOWED
    from sandbox.harness.static_checks import COLLECTIVES, FORBIDDEN_BUILTINS, FORBIDDEN_MODULES

    text = first_prompt(cheat_sheet_on=False, examples=[])
    for named in (*NVCC_OPTIONS_ALLOWED, *FORBIDDEN_MODULES, *FORBIDDEN_BUILTINS):
        assert f"`{named}`" in text, named
    assert all(why in text for why in FORBIDDEN_MODULES.values())
    examples = re.search(r"point-to-point ops \(([^)]*)\)", text).group(1)
    for op in re.findall(r"[a-z_]+", examples.replace("send/recv", "send recv")):
        assert op in COLLECTIVES, op


def test_a_later_prompt_reads_the_input_shapes_kept_by_the_first_without_torch(tmp_path):
    """Working out the inputs' shapes runs the problem's generator on fake tensors, which imports torch
    (seconds): the first prompt keeps them under the cache root, the next needs no torch."""
    import subprocess
    import sys

    env = {**os.environ, "KLOOP_CACHE_DIR": str(tmp_path)}
    runs = [subprocess.run([sys.executable, "-X", "importtime", "-m", "agent", "prompt", "all_reduce", "--world", "4"],
                           capture_output=True, text=True, env=env, check=True) for _ in range(2)]
    imported_torch = [any(line.rstrip().endswith("| torch") for line in run.stderr.splitlines()) for run in runs]
    assert imported_torch == [True, False]
    assert runs[0].stdout == runs[1].stdout and "`bfloat16[12288]`" in runs[1].stdout


def test_a_kept_input_signature_is_keyed_by_the_problem_and_a_bad_file_is_worked_out_again(tmp_path, monkeypatch):
    from agent.prompting import input_signature

    problem = get_problem("all_reduce")
    assert input_signature(problem, 2, "small", "bfloat16", tmp_path) == ["bfloat16[12288]"]
    assert input_signature(problem, 2, "default", "float32", tmp_path) == ["float32[33554432]"]
    kept = sorted((tmp_path / "prompt-inputs").glob("*.json"))
    assert len(kept) == 2
    for path in kept:
        path.write_text('{"inputs": [1, 2')  # cut short
    assert input_signature(problem, 2, "small", "bfloat16", tmp_path) == ["bfloat16[12288]"]
    monkeypatch.setattr(type(problem), "source_hash", lambda self: "a-changed-reference")
    monkeypatch.setattr("agent.prompting._traced_signature", lambda *args: ["traced again"])
    assert input_signature(problem, 2, "small", "bfloat16", tmp_path) == ["traced again"]  # not the old problem's
