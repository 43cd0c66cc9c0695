"""The compiler's jail ends a build that writes past its limits (sandbox/harness/confined_exec.py):
hostile commands that fill the build folder, or the disk through a file deleted and still held
open, are stopped with a line that says why; an honest build beside them is untouched. Real jails,
real writes (at most a few hundred MB)."""

import os
import subprocess
import sys

from sandbox.harness import confined_exec

MIB = 2**20
# 1 MiB at a time, slowly enough that the watch (every 0.2 s) sees it long before the end:
# without the watch all 600 MiB are written (about 6 s)
SLOW_WRITES = "i=0; while [ $i -lt 600 ]; do head -c 1048576 /dev/zero {into}; sleep 0.01; i=$((i+1)); done"


def confined(folder, script: str, *limits: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-P", "-m", "sandbox.harness.confined_exec", "--write", str(folder), *limits, "--", "sh", "-c", script]
    return subprocess.run(command, cwd="/", capture_output=True, text=True, timeout=120)


def test_a_build_that_fills_its_folder_is_stopped_and_says_why(tmp_path):
    result = confined(tmp_path, SLOW_WRITES.format(into=">> big"), "--max-folder-bytes", str(64 * MIB))
    assert result.returncode == confined_exec.STOPPED, result.stderr
    assert "the compiler was stopped: it wrote" in result.stderr and "to its build folder" in result.stderr
    assert (tmp_path / "big").stat().st_size < 200 * MIB


def test_a_build_that_fills_the_disk_through_a_deleted_file_is_stopped(tmp_path):
    """No folder shows a file deleted while held open: the disk's free space does."""
    floor = confined_exec.disk_free_bytes(str(tmp_path)) - 128 * MIB
    result = confined(tmp_path, "exec 3>held; rm held; " + SLOW_WRITES.format(into=">&3"), "--disk-floor-bytes", str(floor))
    assert result.returncode == confined_exec.STOPPED, result.stderr
    assert "until its disk had" in result.stderr
    assert os.listdir(tmp_path) == [] or "held" not in os.listdir(tmp_path)


def test_an_honest_build_beside_them_runs_to_its_end(tmp_path):
    result = confined(tmp_path, "head -c 8388608 /dev/zero > kernel.o && echo built", "--max-folder-bytes", str(64 * MIB))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "built" and (tmp_path / "kernel.o").stat().st_size == 8 * MIB


def test_the_default_floor_leaves_a_nearly_full_disk_room_to_build(tmp_path):
    """A disk with less than twice DISK_FLOOR_BYTES free gets half of what was free as its floor,
    not one it is already under (every build would stop at once); a build runs under the defaults."""
    gib = 2**30
    assert confined_exec.default_floor(100 * gib) == confined_exec.DISK_FLOOR_BYTES == 2 * gib
    assert confined_exec.default_floor(gib) == gib // 2
    result = confined(tmp_path, "echo built")
    assert result.returncode == 0 and result.stdout.strip() == "built", result.stderr
