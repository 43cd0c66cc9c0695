"""GPU tests (marker ``gpu``) for the measured topology and the performance feedback. They print
what matters: the host's measured rates, and the feedback a model gets for a correct kernel.

    python -m pytest -m gpu -s tests/sandbox/test_gpu_perf.py
"""

import json
import os
import subprocess
import sys
import time

import pytest

from sandbox import nvml, topology
from sandbox.evaluate import evaluate_in
from sandbox.harness.config import HarnessConfig
from kloop_runtime.settings import cache_root
from sandbox.topology_measure import measure_host
from tests.fixtures.candidates import source

pytestmark = pytest.mark.gpu

SYMM = source("all_reduce_symm")


def gpu_count() -> int:
    return len(nvml.inventory().gpus)


@pytest.fixture(scope="module")
def measured():
    """This host measured once into the test run's cache dir (the one the sandbox's harness reads)."""
    started = time.monotonic()
    measurement, fresh = measure_host(cache_root(), refresh=True)
    return measurement, time.monotonic() - started


def test_topology_probe_measures_this_host(measured):
    from agent.render import print_topology

    measurement, wall_s = measured
    print(f"\nmeasured in {wall_s:.1f} s (probe {measurement.wall_s:.1f} s)")
    print_topology(measurement)
    count = gpu_count()
    assert len(measurement.gpus) == count and measurement.key
    assert all(g.hbm_copy_gbps > 1500 for g in measurement.gpus), [g.hbm_copy_gbps for g in measurement.gpus]
    assert len(measurement.pairs) == count * (count - 1)
    if count == 1:
        assert "no peer pairs" in " ".join(measurement.notes)
    else:
        assert all(p.peer_access and p.copy_engine_gbps > 50 and p.sm_write_gbps > 50 and p.sm_read_gbps > 50 for p in measurement.pairs)
        assert measurement.sm_write_gbps_by_blocks and measurement.all_peers_write_gbps > 50
    started = time.monotonic()
    again, fresh = measure_host(cache_root())
    assert not fresh and again == measurement and time.monotonic() - started < 5  # served from the cache
    hardware = topology.host_topology(count, cache_root=cache_root())
    print(f"roofline rates: link {hardware.link_gbps} GB/s ({'measured' if hardware.link_measured else 'datasheet'}), "
          f"HBM {hardware.hbm_gbps} GB/s ({'measured' if hardware.hbm_measured else 'datasheet'})")
    assert hardware.hbm_measured and hardware.link_measured == (count > 1)


def test_kloop_topology_cli_reads_the_cache(measured):
    env = {**os.environ, "KLOOP_CACHE_DIR": str(cache_root())}
    result = subprocess.run([sys.executable, "-m", "agent", "topology", "--json"], capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["key"] == measured[0].key
    table = subprocess.run([sys.executable, "-m", "agent", "topology"], capture_output=True, text=True, env=env, timeout=120)
    print("\n" + table.stdout)
    assert table.returncode == 0 and "from the cache" in table.stdout


def config(world, **overrides):
    return HarnessConfig(problem="all_reduce", world=world, device="cuda", **overrides)


@pytest.mark.parametrize("world", [1, 2, 4, 8])
def test_feedback_says_where_the_time_goes(local_sandbox, measured, world):
    from agent.budget import Budget, Spend
    from agent.prompting import feedback_prompt

    if gpu_count() < world:
        pytest.skip(f"needs {world} GPUs")
    report = evaluate_in(local_sandbox, SYMM, config(world))
    print(f"\n--- world {world}: feedback the model gets ---\n"
          + feedback_prompt(report, step=1, budget=Budget(steps=10), spend=Spend(steps=1), best=None))
    print(f"stages {report.stage_wall_s}")
    assert report.status == "correct", report.model_dump_json(indent=1)
    assert report.roofline.hbm_measured and report.roofline.link_measured == (world > 1)
    a = report.analysis
    assert a is not None and a.busy_ms > 0 and 0 <= a.idle_fraction < 1 and a.bottleneck is not None
    assert any(k.name.startswith("one_shot_all_reduce") and k.kind == "custom" for k in report.profile.kernels)
    assert report.reference_profile is not None and report.reference_analysis is not None
    if world > 1:
        assert any(k.kind == "communication" and "nccl" in k.name.lower() for k in report.reference_profile.kernels)
    again = evaluate_in(local_sandbox, SYMM, config(world))
    assert again.reference_cache == "hit" and again.reference_profile == report.reference_profile  # cached with the timing


def test_small_message_is_reported_as_latency_or_host_bound(local_sandbox, measured):
    world = min(gpu_count(), 8)
    report = evaluate_in(local_sandbox, SYMM, config(world, size="latency"))
    a = report.analysis
    print(f"\nworld {world}, 128 KB: {report.candidate_timing.median_ms * 1e3:.1f} us, busy {a.busy_ms * 1e3:.1f} us, "
          f"idle {100 * a.idle_fraction:.0f}%, bound {a.bottleneck}")
    assert report.status == "correct" and a.bottleneck in ("latency", "host_overhead")


def test_measuring_leaves_the_calling_process_without_a_cuda_context(measured):
    """The probe runs in a subprocess: a process that measures (or reads the cache) never initialises CUDA itself."""
    code = ("import torch; from sandbox.topology_measure import measure_host; "
            "measure_host(refresh=True, transfer_mib=64); print('cuda initialised:', torch.cuda.is_initialized())")
    env = {**os.environ, "KLOOP_CACHE_DIR": str(cache_root() / "fresh")}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    print("\n" + result.stdout + result.stderr[-2000:])
    assert result.returncode == 0 and "cuda initialised: False" in result.stdout
