"""Nothing of a local sandbox outlives an owner killed without closing it (sandbox/harness/lifeline.py,
``sweep_orphaned_workdirs`` in sandbox/backends/local.py): the harness, its reference group and the
candidate's jailed ranks (or the agent's shell command) end as soon as the owner is gone, and its
work dir is removed by the next local sandbox started in the same place. Real processes: an owner
process that starts a sandbox and an evaluation of a candidate that never returns (or a shell
command that never ends), killed with SIGKILL midway.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from sandbox.backends.local import OWNER_FILE, LocalSandbox, sweep_orphaned_workdirs
from tests.support.processes import leftover_processes, still_running

NEVER_RETURNS = "import time\n\ndef solution(tensor):\n    time.sleep(3600)\n    return tensor\n"

OWNER = """
import sys
from sandbox.backends.local import LocalSandbox
from sandbox.evaluate import WarmEvaluator, evaluate_in
from sandbox.harness.config import HarnessConfig

config = HarnessConfig(problem="all_reduce", world=2, device="cpu", allow_nccl=True, trials=1, timed=False, size="small",
                       profile=False)
box = LocalSandbox(base_dir=sys.argv[1])
box.start()
print(box.marker, box.workdir, flush=True)
if sys.argv[2] == "warm":
    WarmEvaluator(box).evaluate(sys.argv[3], config)
elif sys.argv[2] == "shell":
    from agent.bash.shell import Shell

    Shell(box, commands=None).run("python3 -c 'import time; time.sleep(3600)' & sleep 3600", timeout_s=3600)
else:
    evaluate_in(box, sys.argv[3], config)
"""
STARTED = {"one-shot": "sandbox.rank", "warm": "sandbox.rank", "shell": "sleep 3600"}


def _started(owner: psutil.Process, what: str) -> list[psutil.Process]:
    """The owner's descendants once one of them runs ``what`` (jailed candidate ranks, the shell's command), else []."""
    try:
        below = owner.children(recursive=True)
        return below if any(what in " ".join(p.cmdline()) for p in below) else []
    except psutil.Error:
        return []


@pytest.mark.parametrize("harness", sorted(STARTED))
def test_an_owner_killed_midway_leaves_no_process_and_no_work_dir(tmp_path, harness):
    owner = subprocess.Popen([sys.executable, "-c", OWNER, str(tmp_path), harness, NEVER_RETURNS], stdout=subprocess.PIPE,
                             text=True, cwd=os.getcwd())
    try:
        marker, workdir = owner.stdout.readline().split()
        deadline = time.monotonic() + 180
        below: list[psutil.Process] = []
        while not below and time.monotonic() < deadline and owner.poll() is None:
            below = _started(psutil.Process(owner.pid), STARTED[harness])
            time.sleep(0.2)
        assert below, f"{STARTED[harness]} never started"
        os.kill(owner.pid, signal.SIGKILL)
        owner.wait()
        assert still_running(below, wait_s=15.0) == [], "processes of the sandbox outlived its owner"
        assert leftover_processes(marker) == []
    finally:
        if owner.poll() is None:
            owner.kill()
    assert os.path.isdir(workdir)  # nothing removed it yet: its owner was killed

    with LocalSandbox(base_dir=str(tmp_path)) as box:  # the next sandbox started there sweeps it
        assert not os.path.exists(workdir)
        assert os.path.isdir(box.workdir)


def test_only_work_dirs_of_owners_that_are_gone_are_swept(tmp_path):
    """Controls: a live owner's work dir, a kept one (it names no owner), and a folder that is not a
    sandbox's stay; the dead owner's goes, even with files its ranks left in it."""
    gone = subprocess.run([sys.executable, "-c", "from sandbox.backends.owner import owner; print(owner())"],
                          capture_output=True, text=True, check=True).stdout.strip()
    dead = tmp_path / "kloop-dead"
    (dead / "groups" / "g1").mkdir(parents=True)
    (dead / "groups" / "g1" / "store").write_text("x")
    (dead / OWNER_FILE).write_text(gone)
    other = tmp_path / "kloop-not-a-sandbox"
    other.mkdir()
    elsewhere = tmp_path / "kloop-another-host"
    elsewhere.mkdir()
    (elsewhere / OWNER_FILE).write_text("some-other-host/1/1")
    assert sweep_orphaned_workdirs(str(tmp_path)) == [str(dead)]
    with LocalSandbox(base_dir=str(tmp_path)) as live, LocalSandbox(base_dir=str(tmp_path), keep=True) as kept:
        assert sweep_orphaned_workdirs(str(tmp_path)) == []
        assert all(os.path.isdir(path) for path in (live.workdir, kept.workdir, other, elsewhere))
    assert not os.path.exists(live.workdir) and os.path.isdir(kept.workdir)  # closed: removed unless kept
