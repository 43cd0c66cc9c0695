"""The service on a GPU (`pytest -m gpu tests/service/test_service_gpu.py` on the H200): a batch submitted by
`kloop batch --server` runs on the server's GPU pool, `scripted:demo-cuda` (its first answer does not
compile, its second passes) judged in emulate (2 ranks on one GPU, never timed) and in cuda (timed:
the episode carries a speedup and the summary a geometric mean)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import yaml

from service.client import parse_sse
from tests.support.service import ROOT, ServerProcess

pytestmark = [pytest.mark.gpu, pytest.mark.slow]


@pytest.mark.parametrize("device, world", [("emulate", 2), ("cuda", 1)])
def test_a_batch_on_the_servers_gpus(tmp_path, device, world):
    server = ServerProcess(tmp_path / "server", "--gpus", "0", "--cpu-slots", "1")
    (tmp_path / "server").mkdir()
    server.start()
    try:
        token = server.token("gpu")
        config = tmp_path / "batch.yaml"
        config.write_text(yaml.safe_dump({"models": ["scripted:demo-cuda"], "problems": ["all_reduce"], "samples": 1, "steps": 2,
                                          "device": device, "world": world}))
        done = subprocess.run([sys.executable, "-m", "agent", "batch", str(config), "--out", str(tmp_path / "out"), "--server",
                               server.url], cwd=ROOT, capture_output=True, text=True, timeout=1500,
                              env={**os.environ, "KLOOP_TOKEN": token, "COLUMNS": "200"})
        print(done.stdout[-4000:], done.stderr[-3000:], server.log()[-3000:])
        assert done.returncode == 0, done.stderr[-2000:]
        with server.client(token) as api:
            job = [j for j in api.get("/v1/jobs").json() if j["kind"] == "batch"][0]
            assert job["status"] == "done"
            summary = json.loads((tmp_path / "out" / "summary.json").read_text())
            assert {k: v for k, v in job["result"].items() if k != "progress"} == summary
            model = summary["models"]["scripted:demo-cuda"]
            assert model["correct"] == 1 and model["infra_failures"] == 0
            results = api.get(f"/v1/batches/{job['id']}/results").json()
            assert [p["status"] for p in results[0]["steps"]] == ["build_failed", "correct"]
            if device == "cuda":
                assert results[0]["speedup"] is not None and model["geomean_speedup"]["value"] is not None
            else:
                assert results[0]["speedup"] is None  # emulation is never timed
            steps = [d for _, t, d in parse_sse(api.get(f"/v1/jobs/{job['id']}/events").iter_lines()) if t == "step"]
            assert [d["status"] for d in steps] == ["build_failed", "correct"]
    finally:
        server.stop()
