"""The measured topology on CPU: cache keys, measured-over-datasheet rates, clean failure without
a GPU, the probe's kernels compile. (Measuring itself: tests/sandbox/test_gpu_perf.py.)"""

import shutil
import subprocess
import sys

import pytest

from sandbox import nvml, topology, topology_measure
from kloop_runtime.settings import MULTICAST_OFF
from sandbox.backends import docker
from tests.support.prompt_fixtures import fake_measurement

INVENTORY = nvml.Inventory(driver="580.159.04", gpus=tuple(
    nvml.GpuRecord(index=i, name="NVIDIA H200", uuid=f"GPU-fake-{i}", memory_mib=143771, nvlinks_active=18) for i in range(8)))


@pytest.fixture
def fake_host(monkeypatch, tmp_path):
    """An 8 x H200 host as NVML would describe it, with its own cache dir."""
    monkeypatch.setattr(nvml, "inventory", lambda: INVENTORY)
    return tmp_path


def cache(root, measurement, inventory=INVENTORY):
    key = topology_measure.host_key(inventory)
    path = topology_measure.cache_path(root, key)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(measurement.model_copy(update={"key": key}).model_dump_json())
    return path


def test_measurement_summaries():
    m = fake_measurement()
    assert m.median("copy_engine_gbps") == 363.0 and m.median("sm_read_gbps") == 348.5
    assert m.median_hbm_copy_gbps() == 4013.5
    assert m.best_link_gbps() == 381.5  # the median pair's best mechanism (push), above the all-peers rate


def test_cached_measurement_replaces_datasheet_rates(fake_host):
    cache(fake_host, fake_measurement())
    hardware = topology.host_topology(8, "NVIDIA H200", fake_host)
    assert hardware.link_measured and hardware.hbm_measured and hardware.measured
    assert hardware.link_gbps == 381.5 and hardware.hbm_gbps == 4013.5 and hardware.datasheet_link_gbps == 450.0
    assert hardware.copy_engine_gbps == 363.0 and hardware.pairs_measured == 56 and hardware.sm_count == 132
    bound = topology.roofline(hardware, comm_bytes=381.5e6, flops=0.0, hbm_bytes=0.0)
    assert bound.bound_ms == pytest.approx(1.0) and bound.link_measured


def test_a_new_driver_or_other_gpus_is_not_served_from_the_cache(fake_host, monkeypatch):
    cache(fake_host, fake_measurement())
    other = nvml.Inventory(driver="590.1", gpus=INVENTORY.gpus)
    monkeypatch.setattr(nvml, "inventory", lambda: other)
    assert topology_measure.cached_measurement(fake_host) is None
    hardware = topology.host_topology(8, "NVIDIA H200", fake_host)
    assert not hardware.measured and hardware.link_gbps == 450.0 and hardware.hbm_gbps == 4800.0


def test_measure_host_uses_the_cache_unless_refreshed(fake_host, monkeypatch):
    calls = []

    def probe(inventory, key, transfer_mib, timeout_s):
        calls.append(key)
        return fake_measurement().model_copy(update={"key": key, "host": "probed"})

    monkeypatch.setattr(topology_measure, "run_probe", probe)
    first, fresh = topology_measure.measure_host(fake_host)
    second, again = topology_measure.measure_host(fake_host)
    assert fresh and not again and first == second and len(calls) == 1
    third, fresh = topology_measure.measure_host(fake_host, refresh=True)
    assert fresh and len(calls) == 2 and third.host == "probed"
    assert topology_measure.cache_path(fake_host, first.key).exists()


def test_no_driver_is_one_clear_line(monkeypatch, tmp_path):
    def missing():
        raise nvml.NvmlUnavailable("no NVIDIA driver on this machine (libnvidia-ml.so.1 not found)")

    monkeypatch.setattr(nvml, "inventory", missing)
    with pytest.raises(topology_measure.TopologyUnavailable, match="no NVIDIA driver.*nothing to measure"):
        topology_measure.measure_host(tmp_path)
    assert topology_measure.cached_measurement(tmp_path) is None
    assert topology.host_topology(2, cache_root=tmp_path).gpu_name == "NVIDIA H200"  # the datasheet fallback


def test_probe_without_a_gpu_fails_cleanly():
    """The real probe subprocess on this machine's CPU-only torch: an error line, not a traceback."""
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    with pytest.raises(topology_measure.TopologyUnavailable, match="torch sees no CUDA device"):
        topology_measure.run_probe(INVENTORY, "k", transfer_mib=1, timeout_s=120)


def test_kloop_topology_without_gpu_prints_one_line():
    if nvml.gpu_model_name() is not None:
        pytest.skip("this machine has a GPU")
    for extra in ([], ["--json"], ["--refresh"]):
        result = subprocess.run([sys.executable, "-m", "agent", "topology", *extra], capture_output=True, text=True)
        assert result.returncode == 1 and "Traceback" not in result.stderr
        assert result.stderr.strip().startswith("no measured topology:") and len(result.stderr.strip().splitlines()) == 1


def test_cuda_visible_devices_selects_gpus(monkeypatch):
    records = list(INVENTORY.gpus)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,1")
    assert [r.index for r in nvml._visible(records)] == [3, 1]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-fake-5,9,2")
    assert [r.index for r in nvml._visible(records)] == [5]  # CUDA stops at the first invalid entry
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert nvml._visible(records) == []


def test_multicast_off_in_the_probe_and_the_sandbox_image():
    assert MULTICAST_OFF["NCCL_NVLS_ENABLE"] == "0" and MULTICAST_OFF["TORCH_SYMM_MEM_DISABLE_MULTICAST"] == "1"
    assert topology_measure.MULTICAST_OFF is MULTICAST_OFF
    assert MULTICAST_OFF.items() <= docker.FIXED_ENV.items()


@pytest.mark.skipif(shutil.which("nvcc") is None and not __import__("os").path.exists("/usr/local/cuda/bin/nvcc"), reason="no nvcc")
def test_probe_kernels_compile(tmp_path):
    from kloop_runtime.build import build_cubin
    from sandbox.topology_probe import KERNELS

    assert build_cubin(KERNELS, arch="90a", cache_dir=tmp_path).stat().st_size > 0
