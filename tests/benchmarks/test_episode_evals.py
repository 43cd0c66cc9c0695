"""benchmarks/episode_evals.py: an episode's evaluations through one warm harness beside a harness
per step, real sessions on the CPU (world 2), the table's rows read back."""

import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def bench(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REPO / "benchmarks" / "episode_evals.py"), *args], cwd=REPO, capture_output=True,
                          text=True, timeout=600, env={**os.environ, "PYTHONPATH": str(REPO)}, check=False)


def test_warm_and_fresh_sessions_are_timed_step_by_step():
    result = bench("--device", "cpu", "--world", "2", "--allow-nccl", "--untimed", "--steps", "2", "--sessions", "1",
                   "--think-s", "1", "--candidate", str(REPO / "tests/fixtures/candidates/all_reduce_fp32.py"))
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    rows = [re.split(r"\s*\|\s*", line.strip()) for line in result.stdout.splitlines() if line.strip().startswith(("warm |", "fresh |"))]
    steps = [row for row in rows if len(row) == 6]
    assert sorted((row[0], row[2]) for row in steps) == [("fresh", "1"), ("fresh", "2"), ("warm", "1"), ("warm", "2")]
    assert all(row[5] == "correct" and float(row[3]) > 0 for row in steps)
    assert re.search(r"fresh / warm, median step after the first: \d+\.\d\dx", result.stdout)


def test_an_episode_of_one_step_is_refused_in_one_line():
    result = bench("--steps", "1")
    assert result.returncode == 2 and "--steps must be at least 2" in result.stderr and "Traceback" not in result.stderr
