"""The Docker backend's mechanics on a real engine: commands, files, limits, clear errors, and
no container outliving its owner (even one killed with SIGKILL)."""

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from sandbox.backends import SandboxError, open_sandbox
from sandbox.backends.base import MAX_OUTPUT_BYTES
from sandbox.backends.docker import DockerSandbox
from sandbox.backends.docker_engine import LABEL, OWNER_LABEL, sweep_orphans
from tests.support.docker import KLOOP, TEST_BASE, box, docker_client, make_box, no_container_left, processes, test_image  # noqa: F401

pytestmark = pytest.mark.docker
ROOT = Path(__file__).resolve().parents[3]


def test_exec_runs_in_the_work_dir_as_a_non_root_user(box):
    result = box.exec(["sh", "-c", "pwd; id -u; echo oops >&2; exit 3"], 30)
    assert result.stdout.split() == ["/work", "10001"]
    assert result.stderr == "oops\n" and result.returncode == 3 and not result.ok and not result.timed_out


def test_files_round_trip_and_stdin(box):
    box.write_file("sub/dir/data.bin", bytes(range(256)) * 1000)
    assert box.read_file("sub/dir/data.bin") == bytes(range(256)) * 1000
    assert box.read_file("sub/dir/data.bin", max_bytes=10) == bytes(range(10))
    assert box.exec(["cat", "sub/dir/data.bin"], 30).ok
    assert box.exec(["wc", "-c"], 30, input=b"x" * 3_000_000).stdout.strip() == "3000000"
    with pytest.raises(SandboxError, match="does not exist"):
        box.read_file("nope.txt")


def test_file_access_stays_in_the_work_dir(box):
    box.exec(["ln", "-s", "/etc/passwd", "leak"], 30)
    for path in ("../etc/passwd", "/etc/passwd", "leak"):
        with pytest.raises(SandboxError, match="outside the sandbox work dir"):
            box.read_file(path)
    with pytest.raises(SandboxError, match="outside the sandbox work dir"):
        box.write_file("../tmp/x", "x")


def test_output_is_capped(box):
    result = box.exec(["python3", "-c", "import sys; sys.stdout.write('x' * (3 * 8 * 2**20))"], 60)
    assert result.truncated and result.ok
    assert MAX_OUTPUT_BYTES <= len(result.stdout) < MAX_OUTPUT_BYTES + 100
    assert "bytes dropped" in result.stdout


def test_timeout_kills_the_command_and_what_escaped_its_group(box):
    box.exec(["sh", "-c", "setsid sleep 1000 >/dev/null 2>&1 &"], 30)  # left running, out of the group
    assert processes(box) == []
    started = time.monotonic()
    result = box.exec(["sh", "-c", "trap '' TERM; sleep 1000"], 2)  # ignores the polite signal too
    elapsed = time.monotonic() - started
    assert result.timed_out and not result.ok
    assert 2 <= elapsed < 2 + 5 + 5
    assert processes(box) == []
    assert box.exec(["true"], 30).ok  # the sandbox lives on


def test_container_is_locked_down(box, docker_client):
    status = box.exec(["cat", "/proc/self/status"], 30).stdout
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    assert int(fields["CapEff"].strip(), 16) == 0 and int(fields["CapBnd"].strip(), 16) == 0
    assert fields["NoNewPrivs"].strip() == "1" and fields["Seccomp"].strip() == "2"
    assert "Read-only file system" in box.exec(["touch", "/usr/x"], 30).stderr
    assert not box.exec(["touch", "/opt/kloop/lib/sandbox/x"], 30).ok
    mounts = box.exec(["cat", "/proc/mounts"], 30).stdout
    options = {line.split()[1]: line.split()[3].split(",") for line in mounts.splitlines()}
    assert "noexec" in options["/tmp"] and "noexec" not in options["/work"] and "nosuid" in options["/work"]
    attrs = docker_client.api.inspect_container(box.container.id)
    host = attrs["HostConfig"]
    assert host["NetworkMode"] == "none" and host["ReadonlyRootfs"] and host["CapDrop"] == ["ALL"]
    assert host["PidsLimit"] == 1024 and host["Memory"] == 6 * 2**30 and host["AutoRemove"]
    assert attrs["Config"]["Labels"][LABEL] == box.marker


def test_multicast_off_and_nccl_on_loopback(box):
    env = dict(line.split("=", 1) for line in box.exec(["env"], 30).stdout.splitlines() if "=" in line)
    assert env["NCCL_NVLS_ENABLE"] == "0" and env["TORCH_SYMM_MEM_DISABLE_MULTICAST"] == "1" and env["NVSHMEM_DISABLE_NVLS"] == "1"
    assert env["NCCL_SOCKET_IFNAME"] == "lo" and env["KLOOP_CACHE_DIR"] == "/cache" and env["HOME"] == "/work"


def test_landlock_is_available_inside_the_container(box):
    """Docker's default seccomp profile lets the Landlock syscalls through (moby#43199);
    the harness relies on them to keep candidate ranks out of the cache."""
    probe = "import sys; from sandbox.harness.confine import landlock_abi; print(landlock_abi())"
    assert int(box.exec(["python3", "-c", probe], 60).stdout) >= 1
    assert "no-landlock" not in box.isolation


def test_a_killed_owner_takes_its_container_along(docker_client, test_image, tmp_path):
    script = textwrap.dedent(f"""
        import sys
        import structlog
        structlog.configure(logger_factory=structlog.PrintLoggerFactory(sys.stderr))
        from sandbox.backends.docker import DockerSandbox
        box = DockerSandbox(image={test_image!r}, cache_volume=None)
        box.start()
        sys.stdout.write(box.container.id + "\\n")
        sys.stdout.flush()
        box.exec(["sleep", "1000"], 1000)
    """)
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=ROOT, text=True)
    try:
        container_id = child.stdout.readline().strip()
        assert container_id, "the child did not start a sandbox"
        assert docker_client.containers.get(container_id).status == "running"
        time.sleep(0.5)
        child.send_signal(signal.SIGKILL)
        child.wait(10)
        killed_at = time.monotonic()
        while time.monotonic() - killed_at < 5:
            if not [c for c in docker_client.containers.list(all=True) if c.id == container_id]:
                break
            time.sleep(0.1)
        else:
            pytest.fail("the container outlived its SIGKILLed owner by 5 s")
    finally:
        child.kill()


def test_orphans_are_swept_at_start_and_by_cleanup(docker_client, test_image):
    dead_owner = f"{socket.gethostname()}/999999999/1"

    def orphan():
        return docker_client.containers.create(test_image, ["sleep", "1000"], labels={LABEL: "orphan", OWNER_LABEL: dead_owner},
                                               network_mode="none")

    first = orphan()
    assert sweep_orphans(docker_client) >= 1
    assert first.id not in [c.id for c in docker_client.containers.list(all=True)]
    second = orphan()
    with DockerSandbox(image=test_image, cache_volume=None):  # start sweeps too
        assert second.id not in [c.id for c in docker_client.containers.list(all=True)]
    third = orphan()
    out = subprocess.run([KLOOP, "sandbox", "cleanup"], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 0 and "removed 1 sandbox container" in out.stdout, out.stdout + out.stderr
    assert third.id not in [c.id for c in docker_client.containers.list(all=True)]


def test_missing_engine_is_one_clear_message(monkeypatch, test_image):
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    with pytest.raises(SandboxError) as error:
        open_sandbox("docker", image=test_image).start()
    message = str(error.value)
    assert "no Docker engine answers at unix:///nonexistent/docker.sock" in message and "dockerd" in message
    assert "\n" not in message


def test_missing_image_says_how_to_build_it():
    with pytest.raises(SandboxError, match="is not on this Docker engine: build it with `kloop sandbox build`"):
        DockerSandbox(image="kernel-loop-sandbox:does-not-exist").start()


def test_gpu_start_failure_names_the_fix(test_image, docker_client):
    if "nvidia" in json.dumps(docker_client.info().get("Runtimes", {})):
        pytest.skip("this engine has the NVIDIA runtime")
    with pytest.raises(SandboxError, match="NVIDIA Container Toolkit"):
        DockerSandbox(image=test_image, gpus="0", cache_volume=None).start()


def test_api_keys_passed_by_the_caller_are_dropped(make_box):
    box = make_box(env={"OPENAI_API_KEY": "sk-caller-secret", "HARMLESS": "yes"})
    env = box.exec(["env"], 30, env={"GITHUB_TOKEN": "ghp-caller-secret"}).stdout
    assert "HARMLESS=yes" in env and "caller-secret" not in env


def test_sdk_build_through_the_cli(docker_client):
    """`kloop sandbox build --base <local image>` builds docker/Dockerfile without a registry."""
    tag = "kernel-loop-sandbox:cli-test"
    started = time.monotonic()
    out = subprocess.run([KLOOP, "sandbox", "build", "--base", TEST_BASE,
                          "--tag", tag, "--network", "none"], capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert "Step 1/" in out.stdout and f"built {tag}" in out.stdout
    image = docker_client.images.get(tag)
    assert image.attrs["Config"]["User"] == "10001:10001"
    docker_client.images.remove(tag, noprune=True)
    print(f"sdk build (cached layers) took {time.monotonic() - started:.1f} s")


def test_build_without_engine_is_one_line(monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    out = subprocess.run([KLOOP, "sandbox", "build"], capture_output=True, text=True, cwd=ROOT, timeout=120,
                         env={**os.environ, "COLUMNS": "400"})
    assert out.returncode == 2
    assert out.stderr.count("\n") == 1 and "no Docker engine answers" in out.stderr


BLOCK_LANDLOCK = {  # what an engine whose seccomp profile predates moby#43199 does to Landlock
    "defaultAction": "SCMP_ACT_ALLOW",
    "syscalls": [{"names": ["landlock_create_ruleset", "landlock_add_rule", "landlock_restrict_self"],
                  "action": "SCMP_ACT_ERRNO", "errnoRet": 38}],
}


def test_without_landlock_the_sandbox_refuses_or_keeps_the_cache_private(test_image, tmp_path, docker_client):
    profile = tmp_path / "no-landlock.json"
    profile.write_text(json.dumps(BLOCK_LANDLOCK))
    with pytest.raises(SandboxError, match="Landlock is not available inside the sandbox container"):
        DockerSandbox(image=test_image, seccomp_profile=str(profile), cache_volume="kloop-test-never-created").start()
    with DockerSandbox(image=test_image, seccomp_profile=str(profile), cache_volume="kloop-test-never-created",
                       require_landlock=False) as box:
        assert "no-landlock" in box.isolation and "seccomp-custom" in box.isolation
        mounts = box.exec(["cat", "/proc/mounts"], 30).stdout
        assert any(line.split()[1] == "/cache" and line.split()[0] == "tmpfs" for line in mounts.splitlines())
    assert "kloop-test-never-created" not in [v.name for v in docker_client.volumes.list()]
