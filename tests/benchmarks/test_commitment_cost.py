"""benchmarks/commitment_cost.py on CPU: both schemes' rows (the transposed one with its sealed copy, made in a
new memfd and in one allocated ahead), the rank's cost and the parent's re-hash."""

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_commitment_cost_prints_both_schemes_by_leaf_size():
    result = subprocess.run([sys.executable, str(REPO / "benchmarks" / "commitment_cost.py"), "--device", "cpu", "--mib", "1", "2",
                             "--repeats", "2", "--leaf-kib", "4", "8"], cwd=REPO, capture_output=True, text=True, timeout=300,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    rows = [line for line in result.stdout.splitlines() if "MiB |" in line]
    assert [r.split("|")[1].strip() for r in rows] == ["transposed", "transposed+sealed", "+sealed, allocated ahead", "tree", "tree"] * 2
    assert [r.split("|")[2].strip() for r in rows] == ["-", "-", "-", "4", "8"] * 2
    assert "MISMATCH" not in result.stdout
