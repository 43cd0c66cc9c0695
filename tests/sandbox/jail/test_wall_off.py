"""A rank walled off from the others (sandbox.jail.landlock.wall_off, entered by each of a CPU
group's ranks before candidate code runs): a peer can take none of its descriptors, through
/proc/PID/fd, pidfd_getfd or a unix socket, and signal it not. Real processes, as ranks are: one
holder with a memfd and an abstract socket, and probes beside it, each in a domain of its own
(every rank is); the control is the same processes without the wall, where every step works."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest

from sandbox.jail import landlock

pytestmark = pytest.mark.skipif(landlock.abi() < 6, reason="Landlock scopes need Linux 6.12 or later")

REPO = Path(__file__).resolve().parents[3]
WORLDS = (2, 4, 8)
HOLDER = textwrap.dedent("""
    import os, socket, sys, time
    from sandbox.jail.landlock import wall_off
    walled = wall_off() if sys.argv[1] == "1" else False
    fd = os.memfd_create("sealed-copy")
    os.write(fd, b"the root's bytes")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind("\\0" + sys.argv[2])
    print(os.getpid(), fd, walled, flush=True)
    time.sleep(60)
""")
PROBE = textwrap.dedent("""
    import array, ctypes, json, os, signal, socket, sys
    from sandbox.jail.landlock import wall_off
    if sys.argv[1] == "1":
        assert wall_off()
    pid, fd, name, folder = int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
    got = {}
    def attempt(step, action):
        try:
            action()
            got[step] = "ok"
        except OSError as error:
            got[step] = error.errno
    attempt("proc_fd", lambda: os.close(os.open(f"/proc/{pid}/fd/{fd}", os.O_RDONLY)))
    def take():
        pidfd = os.pidfd_open(pid)
        libc = ctypes.CDLL(None, use_errno=True)
        taken = libc.syscall(438, pidfd, fd, 0)  # pidfd_getfd, the same number on every architecture
        os.close(pidfd)
        if taken < 0:
            raise OSError(ctypes.get_errno(), "pidfd_getfd")
        os.close(taken)
    attempt("pidfd_getfd", take)
    def send_fd():
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        mine = os.memfd_create("mine")
        sock.sendmsg([b"x"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [mine]))], 0, "\\0" + name)
    attempt("abstract_socket", send_fd)
    attempt("socket_file", lambda: socket.socket(socket.AF_UNIX, socket.SOCK_STREAM).bind(os.path.join(folder, "s")))
    attempt("signal", lambda: os.kill(pid, 0))
    print(json.dumps(got), flush=True)
""")
STEPS = ("proc_fd", "pidfd_getfd", "abstract_socket", "socket_file", "signal")


def _probe_group(world: int, walled: bool, tmp_path: Path) -> tuple[bool, list[dict]]:
    """Rank 0 holds a memfd and an abstract socket; ranks 1..world-1 try to reach them."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    name = f"kloop-wall-{uuid.uuid4().hex}"
    flag = "1" if walled else "0"
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, flag, name], stdout=subprocess.PIPE, text=True, env=env)
    try:
        pid, fd, held = holder.stdout.readline().split()
        results = []
        for peer in range(1, world):
            folder = tmp_path / f"peer{peer}-{flag}"
            folder.mkdir()
            done = subprocess.run([sys.executable, "-c", PROBE, flag, pid, fd, name, str(folder)], capture_output=True, text=True,
                                  env=env, timeout=60)
            assert done.returncode == 0, done.stderr
            results.append(json.loads(done.stdout))
        return held == "True", results
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.parametrize("world", WORLDS)
def test_no_rank_takes_or_reaches_a_walled_off_ranks_descriptors(world, tmp_path):
    held, results = _probe_group(world, True, tmp_path)
    assert held
    assert len(results) == world - 1
    for got in results:
        assert all(got[step] != "ok" for step in STEPS), got


def test_the_same_steps_work_without_the_wall(tmp_path):
    held, results = _probe_group(2, False, tmp_path)
    assert not held
    assert results == [{step: "ok" for step in STEPS}]
