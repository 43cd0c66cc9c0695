"""Bash mode on a GPU (`pytest -m gpu tests/agent/bash/test_bash_gpu.py` on the H200): `scripted:bash-demo-cuda`
writes a CUDA all-reduce over symmetric memory that sums one peer too few, `check` in emulation
shows it wrong, sed fixes it, then check, bench and profile in the episode's own mode, submit;
the full harness judges the submission. Emulate (2 ranks on one GPU) and cuda (world 1)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("device, world", [("emulate", 2), ("cuda", 1)])
def test_the_cuda_bash_demo(tmp_path, device, world):
    done = subprocess.run([sys.executable, "-m", "agent", "run", "all_reduce", "--mode", "bash", "--model", "scripted:bash-demo-cuda",
                           "--device", device, "--world", str(world), "--out", str(tmp_path)], capture_output=True, text=True,
                          timeout=1200, env={**os.environ, "COLUMNS": "200"})
    print(done.stdout[-6000:], done.stderr[-3000:])
    folder = next(tmp_path.iterdir())
    data = json.loads((folder / "trajectory.traj.json").read_text())
    outputs = [m["content"] for m in data["messages"] if m["role"] == "tool"]
    for index, output in enumerate(outputs):
        print(f"--- command {index + 1}: {data['messages'][2 + 2 * index]['extra']['actions'][0]['command'][:100]!r}\n{output[:2500]}")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Cuda compilation tools, release" in outputs[1]  # nvcc runs in the shell
    assert "check solution.py: WRONG" in outputs[2] and "emulate" in outputs[2]
    assert "check solution.py: CORRECT" in outputs[3]
    assert f"check solution.py: CORRECT (all_reduce, world {world}, {device}" in outputs[4]
    if device == "cuda":
        assert "bench solution.py: CORRECT" in outputs[4] and "Speedup over the reference" in outputs[4]
        assert "profile solution.py: CORRECT" in outputs[4] and "top kernels" in outputs[4]
    else:
        assert "emulation is never timed" in outputs[4]
    assert data["info"]["exit_status"] == "Submitted" and data["info"]["verdict"]["status"] == "correct"
    report = json.loads((folder / "final" / "report.json").read_text())
    assert report["status"] == "correct" and report["device"] == device and report["world"] == world
    if device == "cuda":
        assert report["speedup"] is not None
