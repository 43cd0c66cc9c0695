"""benchmarks/cli_latency.py: the real `kloop eval` in fresh processes on the CPU, this tree beside a
baseline checkout (here a second path to this one), the command's own cost read against the harness's."""

import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def bench(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REPO / "benchmarks" / "cli_latency.py"), *args], cwd=REPO, capture_output=True,
                          text=True, timeout=600, env={**os.environ, "PYTHONPATH": str(REPO)}, check=False)


def test_the_command_is_timed_around_its_harness_beside_a_baseline(tmp_path):
    baseline = tmp_path / "baseline"
    baseline.symlink_to(REPO)
    result = bench("--device", "cpu", "--world", "2", "--allow-nccl", "--runs", "1", "--baseline", str(baseline),
                   "--candidate", str(REPO / "tests/fixtures/candidates/all_reduce_fp32.py"))
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    rows = {name: re.split(r"\s*\|\s*", line.strip()) for line in result.stdout.splitlines()
            for name in ("this tree", "baseline") if line.strip().startswith(f"{name} |") and "correct" in line}
    for name, (_, run, wall, harness, around, status) in rows.items():
        assert run == "1" and status == "correct"
        assert float(wall) > float(harness) > 0 and abs(float(wall) - float(harness) - float(around)) < 0.02
    assert set(rows) == {"this tree", "baseline"} and "around the harness" in result.stdout


def test_a_baseline_that_is_not_a_checkout_is_one_line(tmp_path):
    result = bench("--device", "cpu", "--baseline", str(tmp_path))
    assert result.returncode == 2 and "not a kloop checkout" in result.stderr and "Traceback" not in result.stderr
