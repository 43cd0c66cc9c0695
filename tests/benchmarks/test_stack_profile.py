"""benchmarks/stack_profile.py: a py-spy raw profile summed per frame, over the stacks through a frame."""

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PROFILE = """main (app.py:1);empty (torch/distributed/_symmetric_memory/__init__.py:1953);_check_with (torch/__init__.py:1711);<module> (sympy/__init__.py:77) 30
main (app.py:1);empty (torch/distributed/_symmetric_memory/__init__.py:1953);empty_strided_p2p (libtorch_cuda.so) 10
main (app.py:1);import torch (<string>:3) 60
not a stack line
"""


def _run(tmp_path, *args):
    path = tmp_path / "profile.txt"
    path.write_text(PROFILE)
    return subprocess.run([sys.executable, str(REPO / "benchmarks" / "stack_profile.py"), str(path), *args], cwd=REPO / "benchmarks",
                          capture_output=True, text=True, timeout=60)


def _shares(output: str) -> dict[str, str]:
    """frame -> share, from the first (inclusive) table."""
    table = output.split("leaf (self)")[0]
    return {cells[2]: cells[0] for line in table.splitlines() if len(cells := [c.strip() for c in line.split("|")]) == 3
            and cells[0].endswith("%")}


def test_shares_are_of_the_stacks_through_the_frame_asked_for(tmp_path):
    result = _run(tmp_path, "--within", r"empty \(torch/distributed")
    assert result.returncode == 0, result.stderr
    assert "over 40 stacks" in result.stdout
    shares = _shares(result.stdout)
    assert shares["<module> (sympy/__init__.py:77)"] == "75.0%" and shares["empty_strided_p2p (libtorch_cuda.so)"] == "25.0%"
    assert "import torch (<string>:3)" not in shares


def test_without_a_filter_every_stack_counts_and_a_filter_that_matches_nothing_says_so(tmp_path):
    shares = _shares(_run(tmp_path).stdout)
    assert shares["import torch (<string>:3)"] == "60.0%" and shares["main (app.py:1)"] == "100.0%"
    nothing = _run(tmp_path, "--within", "no such frame")
    assert nothing.returncode == 1 and "no stacks through no such frame" in nothing.stdout
