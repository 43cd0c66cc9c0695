"""benchmarks/warm_eval.py: the real CLI against a real ``kloop serve`` of this tree, on the CPU;
the second evaluation finds the server's harness warm (its reference group kept, a candidate group
started ahead): no start-up in its harness time."""

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_warm_evaluations_through_the_server_are_timed_command_to_report(tmp_path):
    rows_path = tmp_path / "rows.json"
    command = [sys.executable, str(REPO / "benchmarks" / "warm_eval.py"), "--device", "cpu", "--runs", "1", "--allow-nccl",
               "--port", "8397", "--candidate", str(REPO / "tests/fixtures/candidates/all_reduce_fp32.py"), "--json", str(rows_path)]
    result = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=600, env={**os.environ, "PYTHONPATH": str(REPO)},
                            check=False)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    written = json.loads(rows_path.read_text())
    first, warm = written["runs"]
    assert first["status"] == warm["status"] == "correct"
    assert warm["startup"] < first["startup"]
    assert warm["wall_s"] >= warm["harness_s"] > 0
    assert "warm median" in result.stdout and "goal" in result.stdout
    where = written["harness_breakdown_s"][1]  # where the warm run's harness time went, by group and command
    assert where["run"] == "warm 1" and where["candidate call"] > 0 and where["reference make"] > 0
    timing = written["timing"][1]  # what the speedup was read from, for a run that reads oddly
    assert timing["run"] == "warm 1" and timing["reference_ms"] > 0 and timing["candidate_ms"] > 0
    assert "   timing: reference" in result.stdout
