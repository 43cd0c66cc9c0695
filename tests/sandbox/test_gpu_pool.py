"""The GPU pool and the device requests it produces (no engine, no GPU needed)."""

import random
import threading
import time

import pytest

from sandbox.gpu_pool import GpuPool, GpuPoolError, device_request, parse_gpu_ids


def test_parse_gpu_ids():
    assert parse_gpu_ids("0,1, 2,3") == ("0", "1", "2", "3")
    assert parse_gpu_ids([4, "5"]) == ("4", "5")
    assert parse_gpu_ids("") == () and parse_gpu_ids(None) == ()
    assert parse_gpu_ids("GPU-8d5f1a2b,MIG-1") == ("GPU-8d5f1a2b", "MIG-1")
    with pytest.raises(GpuPoolError, match="not a GPU id"):
        parse_gpu_ids("0,all")
    with pytest.raises(GpuPoolError, match="repeat"):
        parse_gpu_ids("1,1")


def test_device_request_names_exactly_the_leased_ids():
    request = device_request(["2", "5"])
    assert dict(request) == {"Driver": "", "Count": 0, "DeviceIDs": ["2", "5"], "Capabilities": [["gpu"]], "Options": {}}
    pool = GpuPool.parse("4,5,6,7")
    with pool.lease(2) as lease:
        assert dict(lease.device_request())["DeviceIDs"] == list(lease.device_ids) == ["4", "5"]


def test_docker_host_config_passes_the_gpus_and_scales_limits():
    from sandbox.backends.docker import DockerSandbox

    box = DockerSandbox(gpus="1,3")
    box.uid = box.gid = 10001
    box.device_ids = box.gpus
    config = box._host_config(cache_volume=None)
    assert [dict(r) for r in config["device_requests"]] == [
        {"Driver": "", "Count": 0, "DeviceIDs": ["1", "3"], "Capabilities": [["gpu"]], "Options": {}}]
    assert config["shm_size"] == "8g" and config["mem_limit"] == config["memswap_limit"] == "40g"
    assert config["network_mode"] == "none" and config["read_only"] and config["cap_drop"] == ["ALL"]
    assert "no-new-privileges" in config["security_opt"]
    cpu = DockerSandbox()
    cpu.uid = cpu.gid = 10001
    assert cpu._host_config(cache_volume=None)["device_requests"] is None


def test_container_env_names_the_gpus_or_none():
    from sandbox.backends.docker import container_env

    assert container_env("m", gpus=("2", "3"))["NVIDIA_VISIBLE_DEVICES"] == "2,3"
    assert container_env("m")["NVIDIA_VISIBLE_DEVICES"] == "void"  # not the CUDA image's "all"
    assert "OPENAI_API_KEY" not in container_env("m", {"OPENAI_API_KEY": "sk-x"})


def test_sandbox_leases_from_a_pool():
    from sandbox.backends.docker import DockerSandbox

    pool = GpuPool.parse("0,1,2,3")
    box = DockerSandbox(gpu_pool=pool, gpu_count=3)
    assert box.gpus == ()  # chosen at start, from the pool
    assert DockerSandbox(gpu_count=2).gpus == ("0", "1")


def test_leases_are_disjoint_under_threads():
    pool = GpuPool.parse("0,1,2,3,4,5,6,7")
    in_use: set[str] = set()
    guard = threading.Lock()
    errors: list[str] = []
    done = []

    def worker(seed: int) -> None:
        rng = random.Random(seed)
        for _ in range(20):
            with pool.lease(rng.choice([1, 2, 4, 8]), timeout_s=30) as lease:
                with guard:
                    clash = in_use & set(lease.device_ids)
                    if clash or len(set(lease.device_ids)) != len(lease.device_ids):
                        errors.append(f"{lease.device_ids} overlaps {clash}")
                    in_use.update(lease.device_ids)
                time.sleep(rng.random() * 0.002)
                with guard:
                    in_use.difference_update(lease.device_ids)
        done.append(seed)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors
    assert len(done) == 16
    assert pool.free == tuple(str(i) for i in range(8))


def test_lease_blocks_then_times_out_with_a_clear_message():
    pool = GpuPool.parse("0,1")
    held = pool.lease(2)
    started = time.monotonic()
    with pytest.raises(GpuPoolError, match="became free within"):
        pool.lease(1, timeout_s=0.3)
    assert 0.25 < time.monotonic() - started < 5
    threading.Timer(0.2, held.release).start()
    with pool.lease(1, timeout_s=10) as lease:
        assert lease.device_ids == ("0",)


def test_asking_for_more_than_the_pool_fails_at_once():
    with pytest.raises(GpuPoolError, match="pass more with --gpus"):
        GpuPool.parse("0,1").lease(3)


def test_waiters_are_served_in_order():
    """A request for many GPUs is not starved by a stream of small ones."""
    pool = GpuPool.parse("0,1,2,3")
    first = pool.lease(2)
    order = []

    def take(count, name):
        with pool.lease(count, timeout_s=10):
            order.append(name)
            time.sleep(0.05)

    big = threading.Thread(target=take, args=(4, "big"))
    big.start()
    time.sleep(0.1)
    small = threading.Thread(target=take, args=(1, "small"))
    small.start()
    time.sleep(0.1)
    assert order == []  # two are free, but "big" came first and needs four
    first.release()
    big.join(10)
    small.join(10)
    assert order == ["big", "small"]


def test_eval_options_map_gpus_to_a_pool():
    from agent.errors import UserError
    from agent.run_config import SandboxSettings
    from sandbox.harness.config import HarnessConfig

    def options(backend, device, world, gpus, image):
        return SandboxSettings(backend=backend, gpus=gpus, image=image).backend_options(
            HarnessConfig(problem="all_reduce", device=device, world=world))

    picked = options("docker", "cuda", 2, "0,1,2,3", "img:tag")
    assert picked["image"] == "img:tag" and picked["gpu_count"] == 2 and picked["gpu_pool"].device_ids == ("0", "1", "2", "3")
    assert options("docker", "emulate", 4, "3", None)["gpu_count"] == 1
    assert options("docker", "cpu", 2, None, None) == {}
    assert options("local", "cuda", 2, "2,3", None) == {"env": {"CUDA_VISIBLE_DEVICES": "2,3"}}
    with pytest.raises(UserError, match="needs 4 GPUs"):
        options("docker", "cuda", 4, "0,1", None)
