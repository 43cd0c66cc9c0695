"""The jail's honest controls and lifecycle: what candidate ranks need still works inside
(torch, gloo over loopback, a FileStore in the private /tmp, the work dir), and the whole
tree ends with the jail however it forked. Run from root and from an unprivileged user
(the user-namespace path), through tests/sandbox/jail/driver.py."""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from sandbox.backends import LocalSandbox
from sandbox.jail import Jail, JailError, JailSpec
from tests.sandbox.jail.support import give_to_nobody, processes_with, run_driver

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="compares root and unprivileged jails: run as root")
MODES = ("root", "user")
RANK_ENV = {"PYTHONDONTWRITEBYTECODE": "1", "OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo"}


def _workdir(tmp_path: Path, mode: str, scripts: dict[str, str]) -> Path:
    workdir = tmp_path / "work"
    workdir.mkdir()
    for name, text in scripts.items():
        (workdir / name).write_text(textwrap.dedent(text))
    if mode == "user":
        give_to_nobody(workdir)
    return workdir


def _run(mode: str, workdir: Path, argv: list[str], **spec) -> dict:
    spec = {"workdir": str(workdir), "env": RANK_ENV, **spec}
    return run_driver({"spec": spec, "argv": argv, "timeout_s": 240}, unprivileged=mode == "user")


@pytest.mark.parametrize("mode", MODES)
def test_the_work_dir_private_tmp_and_shm_are_writable(tmp_path, mode):
    script = """
        import os, sys
        assert os.environ["HOME"] == os.getcwd() and os.environ["TMPDIR"] == "/tmp", dict(os.environ)
        for folder in ("/tmp", "/dev/shm"):
            with open(os.path.join(folder, "x"), "w") as handle:
                handle.write("scratch")
        open("made-here.txt", "w").write(str(os.getuid()))
        os.makedirs("sub/deeper")
        os.rename("made-here.txt", "sub/deeper/made-here.txt")
    """
    workdir = _workdir(tmp_path, mode, {"w.py": script})
    out = _run(mode, workdir, [sys.executable, "w.py"])
    assert out["returncode"] == 0, out
    assert (workdir / "sub/deeper/made-here.txt").read_text() == "65534"
    # a user's jail: its user namespace maps no root, which the IPC namespace's limits need
    assert [gap.split(":")[0] for gap in out["gaps"]] == ([] if mode == "root" else ["System V IPC"]), out["gaps"]


@pytest.mark.parametrize("mode", MODES)
def test_import_torch(tmp_path, mode):
    workdir = _workdir(tmp_path, mode, {"t.py": "import torch\nopen('ok', 'w').write(torch.__version__)\n"})
    out = _run(mode, workdir, [sys.executable, "t.py"])
    assert out["returncode"] == 0, out
    assert (workdir / "ok").read_text().split("+")[0] == __import__("torch").__version__.split("+")[0]


LAUNCH = """
    import os, subprocess, sys
    world = int(sys.argv[1])
    ranks = [subprocess.Popen([sys.executable, sys.argv[2], str(rank), str(world)]) for rank in range(world)]
    sys.exit(max(rank.wait() for rank in ranks))
"""
GLOO_RANK = """
    import sys, torch, torch.distributed as dist
    rank, world = int(sys.argv[1]), int(sys.argv[2])
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:29511", rank=rank, world_size=world)
    value = torch.tensor([float(rank + 1)])
    dist.all_reduce(value)
    assert value.item() == world * (world + 1) / 2, value
    open(f"rank{rank}.ok", "w").write(str(value.item()))
    dist.destroy_process_group()
"""


@pytest.mark.parametrize("mode,world", [("root", 2), ("user", 2), ("root", 4)])
def test_gloo_all_reduce_over_loopback(tmp_path, mode, world):
    workdir = _workdir(tmp_path, mode, {"launch.py": LAUNCH, "rank.py": GLOO_RANK})
    out = _run(mode, workdir, [sys.executable, "launch.py", str(world), "rank.py"], network="loopback")
    assert out["returncode"] == 0, out
    assert "loopback-only" in out["measures"] and "landlock-net" not in out["measures"]
    assert sorted(p.name for p in workdir.glob("rank*.ok")) == [f"rank{r}.ok" for r in range(world)]


STORE_RANK = """
    import datetime, errno, socket, sys, torch.distributed as dist
    rank, world = int(sys.argv[1]), int(sys.argv[2])
    store = dist.FileStore("/tmp/handshake.store", world)
    store.set_timeout(datetime.timedelta(seconds=60))
    if rank == 0:
        store.set("hello", "from rank 0")
        try:  # network "none": not even loopback (no gloo, no NCCL bootstrap)
            socket.socket().bind(("127.0.0.1", 0))
            sys.exit("bound a TCP socket on loopback")
        except OSError as error:
            assert error.errno in (errno.EACCES, errno.EADDRNOTAVAIL, errno.EPERM), error
    assert store.get("hello") == b"from rank 0"
    store.add("arrived", 1)
    store.wait(["hello"])
    while store.add("arrived", 0) < world:
        pass
    open(f"rank{rank}.ok", "w").write("ok")
"""


@pytest.mark.parametrize("mode", MODES)
def test_file_store_handshake_without_network(tmp_path, mode):
    workdir = _workdir(tmp_path, mode, {"launch.py": LAUNCH, "rank.py": STORE_RANK})
    out = _run(mode, workdir, [sys.executable, "launch.py", "2", "rank.py"])
    assert out["returncode"] == 0, out
    assert {"landlock-net", "net-namespace"} <= set(out["measures"])
    assert sorted(p.name for p in workdir.glob("rank*.ok")) == ["rank0.ok", "rank1.ok"]


UNIX_RANK = """
    import array, os, socket, sys, time
    rank = int(sys.argv[1])
    path, abstract = os.path.join(os.environ["TMPDIR"], "symm_mem-test"), "\\0kloop-nccl-test"
    if rank == 0:  # as torch symmetric memory (fds over a socket in $TMPDIR) and NCCL (abstract sockets) do
        servers = []
        for address in (path, abstract):
            server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            server.bind(address)
            server.listen(1)
            servers.append(server)
        memfd = os.memfd_create("payload")
        os.write(memfd, b"shared bytes")
        connection, _ = servers[0].accept()
        connection.sendmsg([b"fd"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [memfd]))])
        servers[1].accept()[0].sendall(b"hello")
    else:
        for address in (path, abstract):
            while True:
                try:
                    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                    client.connect(address)
                    break
                except OSError:
                    time.sleep(0.05)
            if address == path:
                _, ancillary, _, _ = client.recvmsg(16, socket.CMSG_SPACE(4))
                fd = array.array("i", ancillary[0][2])[0]
                assert os.pread(fd, 64, 0) == b"shared bytes"
            else:
                assert client.recv(16) == b"hello"
    open(f"rank{rank}.ok", "w").close()
"""


@pytest.mark.parametrize("mode", MODES)
def test_unix_sockets_and_fd_passing_between_the_trees_processes(tmp_path, mode):
    workdir = _workdir(tmp_path, mode, {"launch.py": LAUNCH, "rank.py": UNIX_RANK})
    out = _run(mode, workdir, [sys.executable, "launch.py", "2", "rank.py"])
    assert out["returncode"] == 0, out
    assert sorted(p.name for p in workdir.glob("rank*.ok")) == ["rank0.ok", "rank1.ok"]


FORK_BOMB = """
    import os, time
    while True:
        try:
            os.fork()
        except OSError:
            open("limit-hit", "a").close()
            time.sleep(0.05)
"""


@pytest.mark.parametrize("mode", MODES)
def test_a_fork_bomb_is_bounded_and_ended_whole(tmp_path, mode):
    token = secrets.token_hex(6)
    workdir = _workdir(tmp_path, mode, {f"bomb-{token}.py": FORK_BOMB})
    out = run_driver({"spec": {"workdir": str(workdir), "rlimits": {"nproc": 64}}, "argv": [sys.executable, f"bomb-{token}.py"],
                      "kill_when": str(workdir / "limit-hit"), "timeout_s": 60}, unprivileged=mode == "user")
    assert out["returncode"] == -signal.SIGKILL and out["kill_s"] < 10, out
    assert processes_with(token) == []


DAEMON = """
    import os, sys, time
    token, then = sys.argv[1], sys.argv[2]
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:  # a daemon: own session, parent gone, a fresh command line and environment
            os.execve(sys.executable, [sys.executable, "-c", "open('daemon-ready', 'w'); import time; time.sleep(600)", token], {})
        os._exit(0)
    while not os.path.exists("daemon-ready"):
        time.sleep(0.05)
    open("main-ready", "w").close()
    if then == "stay":
        time.sleep(600)
"""


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("end", ["kill", "argv-exits"])
def test_a_daemon_dies_with_the_jail(tmp_path, mode, end):
    token = secrets.token_hex(6)
    workdir = _workdir(tmp_path, mode, {"daemon.py": DAEMON})
    run = {"spec": {"workdir": str(workdir)}, "argv": [sys.executable, "daemon.py", token, "stay" if end == "kill" else "exit"],
           "timeout_s": 60}
    if end == "kill":
        run["kill_when"] = str(workdir / "main-ready")
    out = run_driver(run, unprivileged=mode == "user")
    assert out["returncode"] == (-signal.SIGKILL if end == "kill" else 0), out
    assert (workdir / "daemon-ready").exists()
    assert processes_with(token) == []


def test_the_old_local_sandbox_let_a_daemon_outlive_it():
    token = secrets.token_hex(6)
    with LocalSandbox() as box:
        box.write_file("daemon.py", textwrap.dedent(DAEMON))
        result = box.exec([sys.executable, "daemon.py", token, "exit"], timeout_s=60)
        assert result.ok, result.stderr
    survivors = processes_with(token)
    for line in survivors:
        os.kill(int(line.split()[0]), signal.SIGKILL)
    assert survivors, "the old backend's group kill and marker sweep should have missed the daemon"


def test_the_jail_ends_when_its_caller_dies(tmp_path):
    token = secrets.token_hex(6)
    caller = textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {str(Path(__file__).resolve().parents[3])!r})
        from sandbox.jail import Jail, JailSpec
        jail = Jail.start(JailSpec(workdir={str(tmp_path)!r}), [sys.executable, "-c", "import time; time.sleep(600)", {token!r}])
        print("started", flush=True)
        time.sleep(600)
    """)
    process = subprocess.Popen([sys.executable, "-c", caller], stdout=subprocess.PIPE, text=True)
    assert process.stdout.readline().strip() == "started"
    assert processes_with(token)
    process.kill()
    process.wait()
    deadline = time.monotonic() + 10
    while processes_with(token) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert processes_with(token) == []


def test_passed_fds_stdout_exit_code_and_timeout(tmp_path):
    read_end, write_end = os.pipe()
    script = f"import os, sys; os.write({write_end}, b'through the fd'); print('on stdout'); sys.exit(3)"
    jail = Jail.start(JailSpec(workdir=str(tmp_path)), [sys.executable, "-c", script], pass_fds=(write_end,), stdout=subprocess.PIPE)
    os.close(write_end)
    assert jail.process.stdout.read() == b"on stdout\n"  # EOF: no trusted process kept a copy
    assert os.read(read_end, 100) == b"through the fd" and os.read(read_end, 100) == b""
    assert jail.wait(30) == 3
    with Jail.start(JailSpec(workdir=str(tmp_path)), [sys.executable, "-c", "import time; time.sleep(600)"]) as sleeper:
        with pytest.raises(subprocess.TimeoutExpired):
            sleeper.wait(0.5)
    assert sleeper.returncode == -signal.SIGKILL


def test_bad_requests_are_clear_errors(tmp_path):
    with pytest.raises(JailError, match="network must be one of none, loopback"):
        JailSpec(workdir=str(tmp_path), network="internet")
    with pytest.raises(JailError, match="absolute path"):
        JailSpec(workdir="relative/dir")
    with pytest.raises(JailError, match="unknown rlimits"):
        JailSpec(workdir=str(tmp_path), rlimits={"stack": 1})
    with pytest.raises(JailError, match="argv is empty"):
        Jail.start(JailSpec(workdir=str(tmp_path)), [])
    with pytest.raises(JailError, match="cannot execute '/no/such/program' in the jail: No such file"):
        Jail.start(JailSpec(workdir=str(tmp_path)), ["/no/such/program"])


def test_gaps_say_what_did_not_hold():
    from sandbox.jail.spec import gaps

    full = ["pid-namespace", "mount-namespace", "net-namespace", "landlock-fs-abi7", "landlock-net", "landlock-scope-signal",
            "landlock-scope-abstract-unix", "ipc-namespace", "sysv-ipc-bounded"]
    assert gaps("none", full) == [] and gaps("loopback", full) == []
    assert "System V IPC" in " | ".join(gaps("none", [m for m in full if m != "sysv-ipc-bounded"]))
    # Docker on a 6.8 kernel: Landlock ABI 4, no namespaces, no scopes
    found = " | ".join(gaps("none", ["landlock-fs-abi4", "landlock-net", "no-new-privs", "seccomp"]))
    for words in ("only TCP is blocked", "signal processes of its own uid", "abstract socket", "by its path",
                  "can outlive the jail"):
        assert words in found, found
    assert "network: not limited to loopback" in " | ".join(gaps("loopback", ["landlock-fs-abi7"]))
    assert "no Landlock" in gaps("none", ["pid-namespace", "net-namespace", "mount-namespace"])[0]


def test_the_work_dir_is_handed_over_but_never_a_planted_hard_link(tmp_path):
    workdir, outside = tmp_path / "work", tmp_path / "outside.secret"
    (workdir / "sub").mkdir(parents=True)
    (workdir / "sub" / "given.py").write_text("x = 1")
    outside.write_text("root's")
    outside.chmod(0o600)
    os.link(outside, workdir / "planted")  # as a tree of an earlier jail could have left it
    Jail.start(JailSpec(workdir=str(workdir)), ["/bin/true"]).wait(30)
    assert os.stat(outside).st_uid == 0 and os.stat(workdir / "planted").st_uid == 0
    assert os.stat(workdir / "sub" / "given.py").st_uid == 65534 and os.stat(workdir / "sub").st_uid == 65534


def test_poll_and_kill_from_several_threads_end_the_jail_once(tmp_path):
    """A warm pool polls a group from one thread while another ends it: the jail's pipes are read
    and closed once (a second reader of the closed status fd raised EBADF in a full run)."""
    import threading

    for _ in range(10):
        jail = Jail.start(JailSpec(workdir=str(tmp_path)), ["sleep", "0.05"])
        errors: list[BaseException] = []

        def hammer():
            try:
                deadline = time.monotonic() + 5
                while jail.poll() is None and time.monotonic() < deadline:
                    pass
            except BaseException as error:  # noqa: BLE001 - collected for the assertion below
                errors.append(error)

        threads = [threading.Thread(target=hammer) for _ in range(4)]
        for thread in threads:
            thread.start()
        jail.process.wait()  # the command has ended: every poller now ends the jail's side too
        returncode = jail.kill()
        for thread in threads:
            thread.join()
        assert errors == [] and jail.poll() == returncode
