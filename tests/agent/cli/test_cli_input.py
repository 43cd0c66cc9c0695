"""Bad command-line input is a one-line error (exit code 2), not a traceback, in every command."""

from __future__ import annotations

import subprocess
import sys

import pytest


def kloop(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "agent", *args], capture_output=True, text=True)


@pytest.mark.parametrize("args, expected", [
    (("--size", "bogus"), "all_reduce has no size 'bogus'; it has default"),
    (("--world", "3"), "all_reduce is defined for world sizes 2, 4, 8 (and 1 for single-GPU timing), not 3"),
    (("--world", "0"), "Invalid value for '--world'"),
])
def test_prompt_refuses_bad_size_and_world(args, expected):
    result = kloop("prompt", "all_reduce", *args, "--device", "cpu")
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr and result.stdout == ""
    assert expected in result.stderr


def test_a_value_the_harness_refuses_is_a_user_error():
    """Whatever front end passes it (the CLI's options have their own bounds; a batch config or an
    API request reach harness_config too), a value HarnessConfig refuses is one line, not a traceback."""
    from agent.errors import UserError
    from agent.run_config import harness_config
    from problems import find_problem

    with pytest.raises(UserError, match="world: Input should be greater than or equal to 1"):
        harness_config(find_problem("all_reduce"), world=0)


def test_eval_gives_the_same_size_message(tmp_path):
    solution = tmp_path / "solution.py"
    solution.write_text("def solution(x):\n    return x\n")
    result = kloop("eval", "all_reduce", str(solution), "--size", "bogus", "--device", "cpu")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "all_reduce has no size 'bogus'; it has " in result.stderr


@pytest.mark.parametrize("command", ["eval", "run"])
def test_a_timing_precision_out_of_range_is_refused(command, tmp_path):
    solution = tmp_path / "solution.py"
    solution.write_text("def solution(x):\n    return x\n")
    args = ("all_reduce", str(solution)) if command == "eval" else ("all_reduce", "--model", "scripted:demo")
    result = kloop(command, *args, "--timing-precision", "1.5")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "--timing-precision" in result.stderr and "less than or equal" in result.stderr, result.stderr


def test_eval_stops_timing_when_the_precision_asked_is_out_of_reach(tmp_path):
    """--timing-precision reaches the judge: on the CPU (whose default is 0, the planned calls only)
    a precision no timing there reaches is asked for; the judge times the planned calls (50) and no
    more, since 4x them would not get there either, and the report says so."""
    import json

    from problems import find_problem

    solution = tmp_path / "solution.py"
    solution.write_text(find_problem("all_reduce").reference_source)
    result = kloop("eval", "all_reduce", str(solution), "--allow-nccl", "--trials", "1", "--timing-precision", "0.0001", "--json")
    report = json.loads(result.stdout)
    assert report["status"] == "correct", report["message"]
    note = next(note for note in report["notes"] if "wider than the precision asked" in note)
    assert "the 200 calls allowed would have left it about" in note, note
    assert 50 <= report["candidate_timing"]["iterations"] < 100, report["candidate_timing"]


@pytest.mark.parametrize("args", [("run", "all_reduce", "--model", "scripted:demo"), ("batch", "{config}")])
def test_an_output_folder_that_cannot_be_made_is_one_line(args, tmp_path):
    config = tmp_path / "batch.yaml"
    config.write_text("models: [scripted:demo]\nproblems: [all_reduce]\nallow_nccl: true\n")
    blocked = tmp_path / "a-file"
    blocked.write_text("")  # a file where the output folder's parent should be
    result = kloop(*(a.format(config=config) for a in args), "--out", str(blocked / "out"))
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    said = " ".join(result.stderr.split())
    assert f"error: {blocked / 'out'}" in said and ": Not a directory" in said, result.stderr


def test_run_budget_options_are_one_group_and_checked():
    help_text = kloop("run", "--help").stdout
    budget_panel = help_text[help_text.index("Budget"):]
    assert all(flag in budget_panel for flag in ("--steps", "--max-run-tokens", "--max-run-cost", "--max-run-wall"))
    result = kloop("run", "all_reduce", "--model", "scripted:demo", "--steps", "0")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "--steps: Input should be greater than or equal to 1" in result.stderr
    result = kloop("run", "all_reduce", "--model", "scripted:demo", "--target-speedup", "-1")
    assert result.returncode == 2 and "--target-speedup: a speedup is above 0" in result.stderr


def test_cli_import_is_light():
    """`kloop --help` and `kloop problems` stay fast: no torch or LLM SDK is imported with the CLI."""
    code = "import sys, agent.cli; print(sorted({'torch', 'openai', 'anthropic'} & set(sys.modules)))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0 and result.stdout.strip() == "[]", result.stderr


def test_a_gpu_device_without_a_gpu_is_one_line_and_asked_without_torch(tmp_path):
    """`--device cuda` on this GPU-less host: a one-line error saying what to do (a CPU build of torch,
    CI's, or no GPU), decided before anything imports torch (the CLI would pay its import again
    before the harness's)."""
    from agent.run_config import torch_cuda_version

    solution = tmp_path / "s.py"
    solution.write_text("def solution(t):\n    return t\n")
    result = kloop("eval", "all_reduce", str(solution), "--device", "cuda", "--world", "1")
    expected = "needs a torch built with CUDA" if torch_cuda_version() is None else "needs an NVIDIA GPU and this machine shows none"
    assert result.returncode == 2 and expected in result.stderr and "Traceback" not in result.stderr, result.stderr
    code = ("import sys\nfrom agent.run_config import check_host_gpus\nfrom sandbox.harness.config import HarnessConfig\n"
            "try:\n    check_host_gpus(HarnessConfig(problem='all_reduce', world=2, device='emulate'))\nexcept Exception as error:\n"
            "    print(type(error).__name__)\nprint('torch' in sys.modules)")
    checked = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert checked.stdout.split() == ["UserError", "False"], checked.stdout + checked.stderr
