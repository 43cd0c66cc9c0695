"""Hostile code run directly in the container (``box.exec``): what the harness's static checks
would have stopped before it ran. Each attempt must fail and the sandbox must report it."""

import time

import pytest

from tests.support.docker import box, docker_client, make_box, no_container_left, processes, test_image  # noqa: F401

pytestmark = pytest.mark.docker

PLANTED = "sk-planted-4f9c2e1b7a"


def python(box, code: str, timeout_s: float = 60):
    return box.exec(["python3", "-c", code], timeout_s)


def test_no_network_but_loopback(box):
    code = """
import socket
for address in [("1.1.1.1", 53), ("8.8.8.8", 443), ("172.17.0.1", 2375), ("10.0.0.1", 80)]:
    try:
        socket.create_connection(address, timeout=3).close()
        print("CONNECTED", address)
    except OSError as error:
        print("refused", address, error.strerror)
try:
    socket.getaddrinfo("pypi.org", 443)
    print("RESOLVED")
except OSError as error:
    print("no dns", error)
server = socket.create_server(("127.0.0.1", 0))
socket.create_connection(server.getsockname(), timeout=3).close()
print("loopback ok")
"""
    result = python(box, code)
    assert "CONNECTED" not in result.stdout and "RESOLVED" not in result.stdout
    assert result.stdout.count("Network is unreachable") == 4, result.stdout
    assert "loopback ok" in result.stdout
    interfaces = box.exec(["cat", "/proc/net/dev"], 30).stdout
    assert [line.split(":")[0].strip() for line in interfaces.splitlines()[2:]] == ["lo"]


def test_host_api_keys_never_reach_the_container(monkeypatch, make_box, docker_client):
    for name in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "TOGETHER_API_KEY", "HF_TOKEN", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(name, PLANTED)
    box = make_box()
    code = f"""
import os
found = [k for k, v in os.environ.items() if "{PLANTED}" in v]
for pid in os.listdir("/proc"):
    if pid.isdigit():
        try:
            with open(f"/proc/{{pid}}/environ", "rb") as handle:
                if b"{PLANTED}" in handle.read():
                    found.append(pid)
        except OSError:
            pass
print("FOUND" if found else "clean", found)
"""
    result = python(box, code)
    assert result.stdout.startswith("clean"), result.stdout
    shell = box.exec(["sh", "-c", "env; cat /proc/1/environ | tr '\\0' '\\n'"], 30).stdout
    assert PLANTED not in shell and "API_KEY" not in shell
    assert PLANTED not in str(docker_client.api.inspect_container(box.container.id)["Config"]["Env"])


def test_fork_bomb_stops_at_the_pids_limit(make_box):
    box = make_box(pids=128)
    count = """
import os, time
children = 0
try:
    while True:
        if os.fork() == 0:
            time.sleep(600)
            os._exit(0)
        children += 1
except OSError as error:
    print(children, error.errno)
"""
    result = python(box, count, 60)
    children, errno = (int(x) for x in result.stdout.split())
    assert errno == 11 and 100 < children < 128  # EAGAIN: the pids cgroup said no
    assert processes(box) == []  # the sleepers were killed after the command
    started = time.monotonic()
    bomb = python(box, "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass", 5)
    assert bomb.timed_out and time.monotonic() - started < 5 + 5 + 15
    assert box.exec(["echo", "alive"], 30).stdout == "alive\n"
    assert processes(box) == []


def test_allocating_past_the_memory_limit_is_reported_not_a_hang(make_box):
    box = make_box(memory="1g")
    started = time.monotonic()
    result = python(box, "hog = []\nwhile True:\n    hog.append(bytearray(64 << 20))", 120)
    assert time.monotonic() - started < 30
    assert result.returncode == 137 and not result.timed_out
    assert "the memory limit (1g) was hit" in result.stderr
    assert box.exec(["true"], 30).ok


def test_sleeping_forever_times_out_and_the_container_goes(make_box, docker_client):
    box = make_box()
    started = time.monotonic()
    result = box.exec(["sleep", "infinity"], 3)
    elapsed = time.monotonic() - started
    assert result.timed_out and result.returncode in (124, 137)
    assert 3 <= elapsed < 3 + 5 + 5
    assert processes(box) == []
    container_id = box.container.id
    box.close()
    deadline = time.monotonic() + 5
    while container_id in [c.id for c in docker_client.containers.list(all=True)] and time.monotonic() < deadline:
        time.sleep(0.1)
    assert container_id not in [c.id for c in docker_client.containers.list(all=True)]


def test_reading_the_harness_cache_from_a_confined_process_fails(box):
    """What a candidate rank gets: Landlock keeps /cache out of reach although it has the same uid."""
    box.exec(["sh", "-c", "echo s3cret > /cache/secret"], 30)
    code = """
from sandbox.harness.confine import apply_landlock, system_read_paths
apply_landlock(system_read_paths(), ["/work"])
try:
    print(open("/cache/secret").read())
except OSError as error:
    print("denied", error.strerror)
"""
    assert python(box, code).stdout.strip() == "denied Permission denied"


def test_escaping_to_the_host_filesystem_or_privileges_fails(box):
    code = """
import os, subprocess
def run(*cmd):
    if subprocess.run(cmd, capture_output=True).returncode != 0:
        raise OSError(f"{cmd[0]} failed")
attempts = {}
for name, action in [
    ("setuid root", lambda: os.setuid(0)),
    ("mount", lambda: run("mount", "-t", "tmpfs", "none", "/mnt")),
    ("user namespace", lambda: run("unshare", "--user", "--map-root-user", "true")),
    ("write /etc", lambda: open("/etc/passwd", "a")),
    ("write harness", lambda: open("/opt/kloop/lib/sandbox/__init__.py", "a")),
    ("docker socket", lambda: open("/var/run/docker.sock", "rb")),
    ("raw socket", lambda: __import__("socket").socket(__import__("socket").AF_PACKET, __import__("socket").SOCK_RAW)),
    ("chroot", lambda: os.chroot("/tmp")),
]:
    try:
        action()
        attempts[name] = "SUCCEEDED"
    except (OSError, PermissionError) as error:
        attempts[name] = "failed"
print(attempts)
"""
    result = python(box, code)
    assert "SUCCEEDED" not in result.stdout and result.stdout.count("failed") == 8, result.stdout + result.stderr
