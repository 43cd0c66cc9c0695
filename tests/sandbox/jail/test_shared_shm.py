"""The sweep of a /dev/shm the jail could not make private (sandbox/jail/shared_shm.py), on a
folder of the test's own: what no live process holds goes, what one holds open or mapped stays;
only where the sandbox says the folder is its own and the tree got none of its own."""

import mmap
import os
import subprocess
import sys

from sandbox.jail import shared_shm


def test_what_no_live_process_holds_is_swept_and_what_one_holds_stays(tmp_path):
    left = tmp_path / "left-by-an-ended-tree"
    nested = tmp_path / "folder" / "deeper" / "left-too"
    opened, mapped = tmp_path / "open-in-a-live-process", tmp_path / "mapped-by-a-live-process"
    nested.parent.mkdir(parents=True)
    for path in (left, nested, opened, mapped):
        path.write_bytes(b"x" * 4096)
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time\nf = open(sys.argv[1], 'rb')\nprint('ready', flush=True)\n"
                               "time.sleep(60)", str(opened)], stdout=subprocess.PIPE)
    try:
        assert holder.stdout.readline() == b"ready\n"
        with open(mapped, "r+b") as handle:
            view = mmap.mmap(handle.fileno(), 4096)  # mapped, its descriptor closed: held through the mapping only
        try:
            assert shared_shm.held_paths(str(tmp_path)) >= {str(opened), str(mapped)}
            assert shared_shm.sweep(str(tmp_path)) == 2
            assert sorted(p.name for p in tmp_path.rglob("*")) == sorted([opened.name, mapped.name])
        finally:
            view.close()
    finally:
        holder.kill()
        holder.wait()
    assert shared_shm.sweep(str(tmp_path)) == 2 and list(tmp_path.iterdir()) == []  # nobody holds them any more


def test_only_a_sandbox_that_owns_the_folder_and_a_tree_without_its_own_sweep(monkeypatch):
    monkeypatch.delenv(shared_shm.SWEEP_ENV, raising=False)
    assert not shared_shm.sweep_wanted(["landlock-fs-abi6", "user:10001"])  # the host's /dev/shm: never
    monkeypatch.setenv(shared_shm.SWEEP_ENV, "1")
    assert shared_shm.sweep_wanted(["landlock-fs-abi6", "user:10001"])
    assert not shared_shm.sweep_wanted(["private-shm", "private-tmp"])  # the tree had its own
    assert os.environ[shared_shm.SWEEP_ENV] == "1"
