"""``--executor ray`` on a local Ray instance (CPU; a custom resource stands in for GPUs): each
episode's placement group holds its ``world`` stand-in GPUs, so with two of them and world 2 no
two episodes overlap; the driver is killed with SIGKILL in the middle and the batch resumes
with every episode recorded once."""

import os
import signal

import pytest

from agent.batch.config import parse_config
from agent.batch.executor_ray import episode_bundle
from tests.support.batch import kloop, read_records, start_batch, wait_for_lines

ray = pytest.importorskip("ray")


def test_an_episode_reserves_its_world_of_gpus_in_one_bundle():
    base = {"models": ["scripted:demo"], "problems": ["all_reduce"]}
    assert episode_bundle(parse_config({**base, "device": "cuda", "world": 4})) == {"CPU": 1, "GPU": 4}
    assert episode_bundle(parse_config({**base, "device": "emulate", "world": 4})) == {"CPU": 1, "GPU": 1}
    assert episode_bundle(parse_config({**base, "world": 2, "ray": {"resources_per_rank": {"fake_gpu": 1}}})) == {"CPU": 1, "fake_gpu": 2}


@pytest.fixture(scope="module")
def cluster():
    for attempt in range(3):  # Ray gives its raylet 30 s to register, a fixed number: a busy 2-core machine can miss it
        try:
            ray.init(num_cpus=2, resources={"kloop_gpu": 2}, include_dashboard=False, configure_logging=False, log_to_driver=False)
            break
        except Exception:
            ray.shutdown()
            if attempt == 2:
                raise
    try:
        yield ray.get_runtime_context().gcs_address
    finally:
        ray.shutdown()


def test_ray_batch_is_gang_scheduled_kill_safe_and_resumes(cluster, tmp_path):
    config, out = tmp_path / "ray.yaml", tmp_path / "out"
    config.write_text(f"""
models:
  - {{spec: "scripted:tests/fixtures/batch_scripts/chatty.yaml", label: chatty}}
  - baseline:reference
problems: [all_reduce]
samples: 2
steps: 2
world: 2
device: cpu
trials: 1
timed: false
allow_nccl: true
ray: {{address: "{cluster}", resources_per_rank: {{kloop_gpu: 1}}}}
""")
    process = start_batch(config, out, tmp_path / "first.log", "--executor", "ray")
    try:
        wait_for_lines(out / "results.jsonl", 1, process, timeout_s=600)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    before = read_records(out / "results.jsonl")
    assert 1 <= len(before) < 4, (tmp_path / "first.log").read_text()[-3000:]
    resumed = kloop("batch", str(config), "--out", str(out), "--executor", "ray", timeout=900)
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    assert "Ray executor" in resumed.stdout
    records = read_records(out / "results.jsonl")
    assert sorted(r["id"] for r in records) == sorted({r["id"] for r in records}) and len(records) == 4
    by_id = {r["id"]: r for r in records}
    assert all(by_id[r["id"]] == r for r in before)
    outcomes = {(r["model"], r["sample"]): r["outcome"] for r in records}
    assert outcomes == {("chatty", 0): "failed", ("chatty", 1): "failed", ("baseline:reference", 0): "correct",
                        ("baseline:reference", 1): "correct"}
    assert by_id["chatty__all_reduce__s0"]["failure_class"] == "FormatError"
    spans = sorted((r["started_at"], r["finished_at"]) for r in records)
    for (_, end), (start, _) in zip(spans, spans[1:]):
        assert start >= end - 0.05, f"two episodes held the two stand-in GPUs at once: {spans}"
