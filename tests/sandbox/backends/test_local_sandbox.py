"""The local backend: environment allow-list, group kill on timeout, work-dir confinement of files."""

import os
import time

import pytest

from sandbox.backends import LocalSandbox, SandboxError
from tests.support.processes import leftover_processes


def test_api_keys_never_reach_the_sandbox(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret-test")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-secret")
    with LocalSandbox() as box:
        result = box.exec(["env"], timeout_s=30)
    assert result.ok
    assert "sk-secret" not in result.stdout and "OPENAI_API_KEY" not in result.stdout and "ANTHROPIC" not in result.stdout
    assert f"HOME={box.workdir}" in result.stdout


def test_timeout_kills_the_whole_group():
    with LocalSandbox() as box:
        started = time.monotonic()
        result = box.exec(["sh", "-c", "sleep 300 & sleep 301 & wait"], timeout_s=2)
        assert result.timed_out and time.monotonic() - started < 20
        time.sleep(0.5)
        assert leftover_processes(box.marker) == []


def test_processes_that_leave_the_group_are_swept():
    with LocalSandbox() as box:
        box.exec(["sh", "-c", "setsid sleep 302 >/dev/null 2>&1 < /dev/null &"], timeout_s=10)
        time.sleep(0.5)
        assert leftover_processes(box.marker) == []  # it left the group; the sweep after each command finds it


def test_files_stay_inside_the_work_dir():
    with LocalSandbox() as box:
        box.write_file("sub/a.txt", "hello")
        assert box.read_file("sub/a.txt") == b"hello"
        with pytest.raises(SandboxError, match="outside"):
            box.write_file("../escape.txt", "x")
        with pytest.raises(SandboxError, match="does not exist"):
            box.read_file("missing.txt")
        workdir = box.workdir
    assert not os.path.exists(workdir)


def test_output_is_capped():
    with LocalSandbox() as box:
        result = box.exec(["sh", "-c", "head -c 20000000 /dev/zero | tr '\\0' x"], timeout_s=30)
    assert result.truncated and len(result.stdout) < 9 * 2**20
