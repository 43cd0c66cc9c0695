"""A bash episode's `check` commands through one long-lived harness (agent/bash/commands.py): the
same harness answers one check after another; a check past the command's time is a `timeout`,
the harness is ended and the next check gets a new one. Real local sandbox, gloo at world 2."""

from agent.bash.commands import KloopCommands
from agent.bash.config import BashSettings
from problems import get_problem
from sandbox.backends import open_sandbox
from sandbox.harness.config import HarnessConfig, StageTimeouts
from tests.fixtures.candidates import source
from tests.support.processes import leftover_processes


def check(commands: KloopCommands, name: str, seconds_left: float = 300.0) -> dict:
    return commands({"tool": "check", "file": f"{name}.py", "source": source(name)}, seconds_left)


def test_checks_share_one_harness_and_a_check_past_its_time_ends_it():
    harness = HarnessConfig(problem="all_reduce", world=2, device="cpu", allow_nccl=True, trials=2,
                            timeouts=StageTimeouts(correctness_s=60))
    with KloopCommands(open_sandbox("local"), get_problem("all_reduce"), harness, BashSettings()) as commands:
        first = check(commands, "all_reduce_fp32")
        pid = commands.evaluator.warm.process.pid
        wrong = check(commands, "all_reduce_wrong_rank")
        assert commands.evaluator.warm.process.pid == pid  # the same harness answered both
        hung = check(commands, "all_reduce_hang", seconds_left=6.0)  # the hang's own stage limit is 60 s
        assert commands.evaluator.warm.process is None  # ended, with the groups it kept
        after = check(commands, "all_reduce_fp32")
        marker = commands.box.marker
    assert first["exit_code"] == 0 and wrong["exit_code"] == 1 and after["exit_code"] == 0
    assert [r["status"] for r in commands.reports] == ["correct", "wrong", "timeout", "correct"]
    assert "timed out" in hung["text"] or "TIMEOUT" in hung["text"], hung["text"]
    assert leftover_processes(marker) == []
