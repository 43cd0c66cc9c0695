"""The jail's private /tmp and /dev/shm are bounded (JailSpec.tmpfs_bytes): files there are host
memory no process holds, so the parent's watch of resident memory cannot see them; a write past
the bound fails (ENOSPC) instead of filling the host's memory. Writing within it still works."""

from __future__ import annotations

import os
import sys
import textwrap
from pathlib import Path

import pytest

from sandbox.jail.spec import MAX_TMPFS_BYTES, JailSpec, default_tmpfs_bytes
from tests.sandbox.jail.support import give_to_nobody, run_driver

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="compares root and unprivileged jails: run as root")
MODES = ("root", "user")
LIMIT = 16 * 2**20
SCRIPT = """
    import errno, os, sys
    limit = int(sys.argv[1])
    found = {}
    for folder in ("/tmp", "/dev/shm"):
        with open(os.path.join(folder, "within"), "wb") as handle:  # the honest control: half the bound
            handle.write(b"x" * (limit // 2))
        try:
            with open(os.path.join(folder, "beyond"), "wb") as handle:
                for _ in range(4):  # four times the bound
                    handle.write(b"y" * limit)
                    handle.flush()
            found[folder] = "wrote it all"
        except OSError as error:
            found[folder] = errno.errorcode.get(error.errno, str(error.errno))
        os.remove(os.path.join(folder, "beyond"))
    open("found.txt", "w").write(repr(sorted(found.items())))
"""


@pytest.mark.parametrize("mode", MODES)
def test_private_tmp_and_shm_are_bounded(tmp_path, mode):
    workdir = tmp_path / "work"
    workdir.mkdir()
    (workdir / "fill.py").write_text(textwrap.dedent(SCRIPT))
    if mode == "user":
        give_to_nobody(workdir)
    spec = {"workdir": str(workdir), "env": {"PYTHONDONTWRITEBYTECODE": "1"}, "tmpfs_bytes": LIMIT}
    out = run_driver({"spec": spec, "argv": [sys.executable, "fill.py", str(LIMIT)], "timeout_s": 120}, unprivileged=mode == "user")
    assert out["returncode"] == 0, out
    assert (workdir / "found.txt").read_text() == repr([("/dev/shm", "ENOSPC"), ("/tmp", "ENOSPC")])


def test_the_default_bound_is_generous_and_below_the_hosts_memory(tmp_path):
    host = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    assert default_tmpfs_bytes() == min(MAX_TMPFS_BYTES, host // 8)
    spec = JailSpec(workdir=str(tmp_path))
    assert spec.config(["true"], ())["tmpfs_bytes"] == default_tmpfs_bytes()
    assert JailSpec(workdir=str(tmp_path), tmpfs_bytes=LIMIT).config(["true"], ())["tmpfs_bytes"] == LIMIT
