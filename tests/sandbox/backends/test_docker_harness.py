"""The harness inside the container: the same verdicts as the local backend, and hostile
candidates that pass the static checks fail cleanly (Landlock, audit hook, read-only root,
memory limit, stage timeouts)."""

import io
import tarfile
import time

import pytest

from sandbox.backends import LocalSandbox
from sandbox.evaluate import evaluate_in
from sandbox.harness.config import HarnessConfig, StageTimeouts
from tests.support.docker import TEST_IMAGE, KLOOP, box, docker_client, make_box, no_container_left, processes, test_image  # noqa: F401

pytestmark = pytest.mark.docker

CORRECT = """
import torch
import torch.distributed as dist


@torch.no_grad()
def solution(tensor):
    out = tensor.clone()
    dist.all_reduce(out)
    return out
"""

WRONG = """
import torch


def solution(tensor):
    return tensor.clone()  # this rank's share only, never summed
"""

SYNTAX_ERROR = """
def solution(tensor:
    return tensor
"""

READ_CACHE_SECRET = """
import os

import torch


def solution(tensor):
    fd = os.open("/cache/secret", os.O_RDONLY)  # the seed secret, outside the work dir
    os.read(fd, 64)
    return tensor.clone()
"""

WRITE_INTO_HARNESS = """
import torch


def solution(tensor):
    with open("/opt/kloop/lib/sandbox/harness/compare.py", "a") as handle:
        handle.write("\\ndef compare_outputs(*args, **kwargs):\\n    return None\\n")
    return tensor.clone()
"""

EAT_MEMORY = """
import torch


def solution(tensor):
    hog = []
    while True:
        hog.append(torch.ones(2**27, dtype=torch.uint8))  # 128 MiB at a time, every page touched
"""

SPIN_FOREVER = """
def solution(tensor):
    while True:
        pass
"""


def config(**overrides) -> HarnessConfig:
    base = dict(problem="all_reduce", world=2, device="cpu", allow_nccl=True, timed=False, trials=3)
    return HarnessConfig(**{**base, **overrides})


@pytest.fixture(scope="module")
def local_verdicts(tmp_path_factory):
    """The local backend's verdicts on the same candidates (its own cache dir)."""
    with LocalSandbox(env={"KLOOP_CACHE_DIR": str(tmp_path_factory.mktemp("local-cache"))}) as local:
        return {name: evaluate_in(local, source, config()).status for name, source in
                (("correct", CORRECT), ("wrong", WRONG), ("syntax", SYNTAX_ERROR))}


@pytest.mark.parametrize("name, source, expected", [("correct", CORRECT, "correct"), ("wrong", WRONG, "wrong"),
                                                    ("syntax", SYNTAX_ERROR, "build_failed")])
def test_same_verdicts_as_the_local_backend(box, local_verdicts, name, source, expected):
    report = evaluate_in(box, source, config())
    assert report.status == expected == local_verdicts[name], report.message
    assert "container" in report.isolation
    if expected != "build_failed":
        assert any(m.startswith("landlock-fs-abi") for m in report.isolation), report.isolation
    if expected == "wrong":
        assert report.mismatch is not None and "wrong on" in report.message


def test_shared_cache_volume_is_reused_across_sandboxes(make_box, docker_client):
    volume = "kloop-test-cache"
    def secret() -> bytes:
        """The harness's per-host secret, read from the volume as a file (a container's log stream
        turns binary into text and can come back empty when the container exits at once)."""
        reader = docker_client.containers.create(TEST_IMAGE, ["true"], network_mode="none",
                                                 volumes={volume: {"bind": "/cache", "mode": "ro"}})
        try:
            chunks, _ = reader.get_archive("/cache/secret")
            with tarfile.open(fileobj=io.BytesIO(b"".join(chunks))) as archive:
                return archive.extractfile("secret").read()
        finally:
            reader.remove(force=True)

    try:
        first = evaluate_in(make_box(cache_volume=volume), CORRECT, config())
        kept = secret()
        second = evaluate_in(make_box(cache_volume=volume), CORRECT, config())
        assert first.status == second.status == "correct"
        assert len(kept) == 32 and secret() == kept  # the second sandbox used the first one's cache, secret and all
    finally:
        for box in list(docker_client.containers.list(all=True, filters={"volume": volume})):
            box.remove(force=True)
        docker_client.volumes.get(volume).remove(force=True)


def test_reading_the_cache_outside_the_work_dir_fails(box):
    report = evaluate_in(box, READ_CACHE_SECRET, config())
    assert report.status == "crashed", report.message
    assert "Permission denied" in report.message and "/cache/secret" in report.message
    assert box.exec(["test", "-s", "/cache/secret"], 30).ok  # it exists; the candidate just cannot read it
    assert processes(box) == []


def test_writing_into_the_installed_harness_is_rejected(box):
    before = box.exec(["sha256sum", "/opt/kloop/lib/sandbox/harness/compare.py"], 30).stdout
    report = evaluate_in(box, WRITE_INTO_HARNESS, config())
    assert report.status == "crashed" and "Permission denied" in report.message, report.message  # the jail's Landlock
    assert box.exec(["sha256sum", "/opt/kloop/lib/sandbox/harness/compare.py"], 30).stdout == before


def test_eating_memory_hits_the_limit_and_is_reported(make_box):
    box = make_box(memory="3g")
    started = time.monotonic()
    report = evaluate_in(box, EAT_MEMORY, config())
    assert time.monotonic() - started < 120  # reclaim can take a while; a hang would be the 180 s stage timeout
    assert report.status == "crashed", report.message
    assert "ended without answering" in report.message and "out of memory" in report.message
    assert box.exec(["true"], 30).ok and processes(box) == []


def test_spinning_forever_times_out(box):
    started = time.monotonic()
    report = evaluate_in(box, SPIN_FOREVER, config(timeouts=StageTimeouts(correctness_s=5)))
    assert report.status == "timeout", report.message
    assert time.monotonic() - started < 60
    assert processes(box) == []


@pytest.mark.parametrize("source, exit_code, verdict", [(CORRECT, 0, "CORRECT"), (WRONG, 1, "WRONG")])
def test_kloop_eval_with_the_docker_sandbox(test_image, tmp_path, source, exit_code, verdict):
    import os
    import subprocess

    solution = tmp_path / "candidate.py"
    solution.write_text(source)
    out = subprocess.run([KLOOP, "eval", "all_reduce", str(solution), "--allow-nccl", "--sandbox", "docker", "--image", test_image,
                          "--no-timed", "--trials", "2"], capture_output=True, text=True, timeout=300, env={**os.environ, "COLUMNS": "200"})
    assert out.returncode == exit_code, out.stdout[-3000:] + out.stderr[-3000:]
    assert verdict in out.stdout


def test_kloop_run_with_the_docker_sandbox(test_image, tmp_path):
    """The scripted demo through the Docker sandbox: one container for the episode, each step in its own folder."""
    import json
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "agent", "run", "all_reduce", "--model", "scripted:demo", "--allow-nccl", "--steps", "2",
                          "--trials", "2", "--sandbox", "docker", "--image", test_image, "--out", str(tmp_path)],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    (folder,) = tmp_path.iterdir()
    statuses = [json.loads((folder / f"steps/00{i}/report.json").read_text())["status"] for i in (1, 2)]
    assert statuses == ["wrong", "correct"]
