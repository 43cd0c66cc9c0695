"""Fixtures for the tests marked ``docker`` (a real engine, no mocks): the engine, the CPU
test image (rebuilt through the SDK when the harness sources changed), sandboxes that are
always closed, and a check that no container of this process outlives its test."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from sandbox.backends import SandboxError
from sandbox.backends.docker import DockerSandbox
from sandbox.backends.docker_engine import OWNER_LABEL, connect, owner, sandbox_containers

TEST_IMAGE = os.environ.get("KLOOP_TEST_IMAGE", "kernel-loop-sandbox:cpu-test")
TEST_BASE = os.environ.get("KLOOP_TEST_BASE", "kernel-loop-base:cpu-test")
KLOOP = str(Path(sys.executable).parent / "kloop")  # the console script, as users run it
SETUP_HINT = "run docker/ci_setup.sh as root (installs and starts the engine, builds the test image)"


@pytest.fixture(scope="session")
def docker_client():
    try:
        return connect()
    except SandboxError as error:
        problem = str(error)
    pytest.fail(f"the docker tests need a Docker engine: {problem}. {SETUP_HINT}", pytrace=False)


@pytest.fixture(scope="session")
def test_image(docker_client) -> str:
    """The CPU test image, current with this checkout's harness sources."""
    import docker
    from sandbox.backends.docker_image import SOURCE_LABEL, build_image, source_digest

    try:
        image = docker_client.images.get(TEST_IMAGE)
    except docker.errors.ImageNotFound:
        image = None
    if image is None or image.labels.get(SOURCE_LABEL) != source_digest():
        try:
            docker_client.images.get(TEST_BASE)
        except docker.errors.ImageNotFound:
            pytest.fail(f"the test base image {TEST_BASE} is missing: {SETUP_HINT}", pytrace=False)
        build_image(tag=TEST_IMAGE, base=TEST_BASE, network="none")  # layer cache: seconds
    return TEST_IMAGE


@pytest.fixture
def make_box(test_image):
    """make_box(**options) -> a started DockerSandbox (private tmpfs cache, modest limits)."""
    boxes = []

    def make(**options) -> DockerSandbox:
        defaults = dict(image=test_image, cache_volume=None, memory="6g", pids=1024, work_size="2g")
        box = DockerSandbox(**{**defaults, **options})
        boxes.append(box)
        box.start()
        return box

    yield make
    for box in boxes:
        box.close()


@pytest.fixture
def box(make_box) -> DockerSandbox:
    return make_box()


@pytest.fixture(autouse=True)
def no_container_left(docker_client):
    yield
    deadline = time.monotonic() + 10
    def mine():
        return [c.name for c in sandbox_containers(docker_client) if c.labels.get(OWNER_LABEL) == owner()]

    while (left := mine()) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not left, f"sandbox containers left behind: {left}"


LIVE_PROCESSES = r"""
import os
for pid in os.listdir('/proc'):
    if pid.isdigit() and int(pid) not in (1, os.getpid(), os.getppid()):
        try:
            state = open('/proc/%s/stat' % pid).read().rsplit(')', 1)[1].split()[0]
            command = open('/proc/%s/cmdline' % pid, 'rb').read().replace(b'\0', b' ').decode(errors='replace').strip()
        except OSError:
            continue
        if state != 'Z':
            print('%s %s %s' % (pid, state, command))
"""


def processes(box: DockerSandbox) -> list[str]:
    """Processes alive in the container besides PID 1 (the keeper) and the listing command itself,
    as "pid state command". A zombie is dead already: killed, waiting for PID 1 to reap it."""
    return box.exec(["python3", "-S", "-c", LIVE_PROCESSES], 30).stdout.splitlines()
