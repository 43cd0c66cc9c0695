"""SIGTERM (``kill``, a scheduler ending a job) unwinds a command like Ctrl-C: its sandbox is closed, so
no process and no work dir of it is left, and a run's trajectory says it was terminated. Before,
the CLI vanished mid-work and its harness and ranks ran on until their evaluation ended."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.support.processes import still_running

NEVER_RETURNS = "import time\n\n\ndef solution(tensor):\n    time.sleep(3600)\n    return tensor\n"
SCRIPT = "- |\n  Here it is.\n\n  ```python\n" + "".join(f"  {line}\n" if line else "\n" for line in NEVER_RETURNS.splitlines()) + "  ```\n"


def _terminate_once_ranks_run(command: list[str], tmp_path: Path) -> tuple[subprocess.CompletedProcess, list[psutil.Process]]:
    env = {**os.environ, "TMPDIR": str(tmp_path / "tmp")}  # the local sandbox's work dir goes there
    (tmp_path / "tmp").mkdir()
    process = subprocess.Popen([sys.executable, "-m", "agent", *command], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, env=env, cwd=tmp_path)
    below: list[psutil.Process] = []
    deadline = time.monotonic() + 180
    try:
        while time.monotonic() < deadline and process.poll() is None:
            below = psutil.Process(process.pid).children(recursive=True)
            if any("sandbox.rank" in " ".join(p.cmdline()) for p in below):
                break
            time.sleep(0.2)
        else:
            pytest.fail(f"the candidate's ranks never ran: {process.poll()}")
        assert list((tmp_path / "tmp").glob("kloop-*")), "the sandbox's work dir is not where the test looks"
        process.send_signal(signal.SIGTERM)
        stdout, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr), below


def test_a_terminated_eval_leaves_nothing_behind(tmp_path):
    (tmp_path / "solution.py").write_text(NEVER_RETURNS)
    done, below = _terminate_once_ranks_run(["eval", "all_reduce", "solution.py", "--world", "2", "--allow-nccl"], tmp_path)
    assert done.returncode == 130, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    assert still_running(below, wait_s=5.0) == []
    assert list((tmp_path / "tmp").glob("kloop-*")) == []


def test_a_terminated_run_says_so_in_its_trajectory(tmp_path):
    (tmp_path / "never.yaml").write_text(SCRIPT)
    done, below = _terminate_once_ranks_run(["run", "all_reduce", "--model", f"scripted:{tmp_path / 'never.yaml'}", "--device",
                                             "cpu", "--allow-nccl", "--steps", "1", "--out", str(tmp_path / "runs")], tmp_path)
    assert done.returncode == 130, done.stderr[-2000:]
    assert "interrupted; trajectory:" in done.stderr
    assert still_running(below, wait_s=5.0) == []
    assert list((tmp_path / "tmp").glob("kloop-*")) == []
    trajectory = json.loads(next((tmp_path / "runs").glob("*/trajectory.traj.json")).read_text())
    assert trajectory["info"]["exit_status"] == "Interrupted"
    assert "terminated (SIGTERM)" in trajectory["messages"][-1]["content"]
