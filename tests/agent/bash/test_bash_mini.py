"""mini-swe-agent (the real package from PyPI) driving kloop's sandbox through
agent.bash.mini.KloopEnvironment: its DefaultAgent, its models, its trajectory format."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("minisweagent", reason="mini-swe-agent is the [mini] extra")
pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the agent's shell runs in the jail: run as root (or with user namespaces)")
EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "mini_swe_agent_in_kloop.py"


def test_the_example_runs_mini_swe_agents_default_agent_in_the_sandbox(tmp_path):
    done = subprocess.run([sys.executable, str(EXAMPLE), "--out", str(tmp_path)], capture_output=True, text=True, timeout=900,
                          env={**os.environ, "MSWEA_GLOBAL_CONFIG_DIR": str(tmp_path / "mswea")})
    print(done.stdout, done.stderr[-3000:])
    assert done.returncode == 0
    assert "exit status: Submitted" in done.stdout and "verdict: correct" in done.stdout
    data = json.loads((tmp_path / "all_reduce.traj.json").read_text())
    assert data["trajectory_format"] == "mini-swe-agent-1.1" and data["info"]["exit_status"] == "Submitted"
    assert "ReduceOp.SUM" in data["info"]["submission"]
    assert data["info"]["config"]["environment_type"] == "agent.bash.mini.KloopEnvironment"
    observations = [m["content"] for m in data["messages"] if m["role"] == "tool"]
    assert any("check solution.py: WRONG" in o for o in observations)
    assert any("bench solution.py: " in o for o in observations)


def test_mini_swe_agents_own_submit_convention(tmp_path, monkeypatch):
    monkeypatch.setenv("MSWEA_SILENT_STARTUP", "1")
    monkeypatch.setenv("MSWEA_GLOBAL_CONFIG_DIR", str(tmp_path / "mswea"))
    from minisweagent.exceptions import Submitted

    from agent.bash.mini import KloopEnvironment

    with KloopEnvironment(problem="all_reduce", allow_nccl=True, timeout=60) as env:
        first = env.execute({"command": "ls; echo $OPENAI_API_KEY; sleep 60"}, timeout=3)
        assert first["returncode"] != 0 and "timed out" in first["exception_info"]
        assert "reference.py" in first["output"] and "TASK.md" in first["output"]
        assert env.get_template_vars()["task"].startswith("# Task: all_reduce")
        with pytest.raises(Submitted) as submitted:
            env.execute({"command": "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT; echo 'def solution(x): return x'"})
    assert submitted.value.messages[0]["extra"]["submission"] == "def solution(x): return x\n"
    assert env.submission.file == "(output)"
