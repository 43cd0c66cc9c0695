"""Hostile commands in the agent's shell (bash mode), each a test that says what happened.

The shell runs one command at a time in the jail the judge's candidate ranks get. The world
outside is real: an API key in this process's environment, a secret in the harness's cache,
the project's packages and oracles, a TCP listener on loopback outside the jail, the sandbox's
own folders beside the shell's. kloop's commands are answered by a stand-in here (the real
ones run the harness: tests/agent/bash/test_bash_agent.py).
"""

from __future__ import annotations

import os
import secrets
import socket
import threading
import time
from pathlib import Path

import psutil
import pytest

from agent.bash.shell import Shell
from kloop_runtime import settings
from sandbox.backends import LocalSandbox
from sandbox.jail.spec import TREE_UIDS

PROJECT_ROOT = Path(__file__).resolve().parents[3]
pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the jail's full set of measures needs root (or user namespaces)")


class StandIn:
    """kloop's commands, answered without the harness; keeps what it was asked."""

    def __init__(self):
        self.requests: list[dict] = []

    def __call__(self, request: dict, seconds_left: float) -> dict:
        self.requests.append(request)
        return {"text": f"{request['tool']} {request['file']}: {len(request['source'])} characters", "exit_code": 0}


@pytest.fixture
def shell():
    with Shell(LocalSandbox(), StandIn(), output_limit_chars=4000) as shell:
        yield shell


def run(shell: Shell, command: str, timeout_s: float = 60):
    result = shell.run(command, timeout_s)
    print(f"$ {command}\n-> returncode {result.returncode}, timed out {result.timed_out}, {result.duration_s:.1f} s\n{result.output}")
    return result


def processes_with(marker: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            if any(marker in part for part in proc.info["cmdline"] or []):
                found.append(proc)
        except psutil.Error:
            continue
    return found


def test_the_shell_runs_in_the_jail_with_every_measure(shell):
    """What happened: the command ran as the episode's own uid (under root; the caller's elsewhere)
    in new PID, mount, network and IPC namespaces, caps dropped, seccomp and Landlock (files, TCP,
    signal and abstract-socket scopes); no gap. The next command of the episode has the same uid."""
    result = run(shell, "id -u; pwd; ls")
    uid = int(result.head.split()[0])
    assert result.returncode == 0 and uid != 0
    assert uid in TREE_UIDS if os.geteuid() == 0 else uid == os.geteuid()
    assert run(shell, "id -u").head.split()[0] == str(uid)
    assert result.head.split()[1] == f"{shell.root}/home"
    for measure in ("pid-namespace", "mount-namespace", "net-namespace", "caps-dropped", "seccomp", "landlock-net",
                    "landlock-scope-signal", "private-tmp"):
        assert measure in result.measures
    assert any(m.startswith("landlock-fs") for m in result.measures)
    assert result.gaps == []


def test_reading_keys_finds_none(shell, monkeypatch):
    """What happened: no API key in the command's environment, nor in its parents' (their /proc
    is not visible: a fresh /proc), nor in files of the user's home, the cache's secret or the
    project's packages and oracles (permission denied / not there)."""
    key = f"sk-test-{secrets.token_hex(8)}"
    monkeypatch.setenv("OPENAI_API_KEY", key)
    monkeypatch.setenv("ANTHROPIC_API_KEY", key)
    cache = settings.cache_root()
    cache.mkdir(parents=True, exist_ok=True)
    (cache / "secret").write_bytes(b"host-secret-" + key.encode())
    oracle = next(PROJECT_ROOT.joinpath("problems").rglob("oracle.py"))
    netrc = Path.home() / f".kloop-test-netrc-{secrets.token_hex(4)}"
    netrc.write_text(f"machine api.openai.com password {key}\n")
    try:
        result = run(shell, f"env; cat /proc/*/environ; grep -r {key} / --include=*netrc* 2>&1 | head -3; "
                            f"cat {netrc}; cat {cache}/secret; cat {oracle} | head -3; cat {PROJECT_ROOT}/agent/providers/base.py | head -3; "
                            f"ls {PROJECT_ROOT}; ls {shell.box.workdir}; ls ~/..; echo done")
    finally:
        netrc.unlink()
    assert "done" in result.output
    assert key not in result.output and "host-secret" not in result.output
    assert "def solution" not in result.output and "class Message" not in result.output
    assert "OPENAI_API_KEY" not in result.output and "KLOOP_CACHE_DIR" not in result.output
    assert "Permission denied" in result.output or "No such file" in result.output


def test_no_network_even_to_a_listener_on_this_machine(shell):
    """What happened: connecting to a TCP listener on this machine's loopback (outside the jail)
    and to a public address both fail: the jail has its own network namespace with no interface up
    and Landlock refuses TCP connects."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    port = server.getsockname()[1]
    accepted = []
    server.settimeout(8)

    def accept():
        try:
            accepted.append(server.accept())
        except OSError:
            pass

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    probe = ("import socket\nfor address in [('127.0.0.1', %d), ('1.1.1.1', 443), ('8.8.8.8', 53)]:\n"
             "    try:\n        socket.create_connection(address, timeout=3); print('CONNECTED', address)\n"
             "    except OSError as e:\n        print('refused', address, e)\n" % port)
    shell.write("probe.py", probe)
    result = run(shell, "python probe.py; (echo > /dev/tcp/127.0.0.1/%d) 2>&1; ip -brief addr 2>/dev/null; true" % port)
    thread.join(10)
    server.close()
    assert "CONNECTED" not in result.output and result.output.count("refused") == 3
    assert accepted == []


def test_a_fork_bomb_is_contained_and_ended(shell):
    """What happened: the fork bomb hit the process limit of the shell's tree (fork: retry /
    Resource temporarily unavailable), the command was killed at its timeout, every one of its
    processes went with it, and the next command ran normally."""
    name = f"bomb_{secrets.token_hex(4)}"
    started = time.monotonic()
    result = run(shell, f"{name}() {{ {name} | {name} & }}; {name}; sleep 30", timeout_s=8)
    assert result.timed_out and time.monotonic() - started < 40
    assert processes_with(name) == []
    assert run(shell, "echo still-here").head.strip() == "still-here"


def test_writing_outside_the_home_folder_fails_or_stays_inside(shell, tmp_path):
    """What happened: writes to the project, the sandbox's own folders (beside the shell's home,
    the spool that carries kloop's commands), /root and /etc are refused; /tmp and /dev/shm are
    the jail's own and gone after the command."""
    tmp_path.chmod(0o777)
    marker = secrets.token_hex(6)
    targets = [PROJECT_ROOT / f"pwn-{marker}", Path(shell.box.workdir) / f"pwn-{marker}", Path(shell.root) / "spool" / f"pwn-{marker}",
               Path(shell.root) / "tools" / "bin" / "check", Path(f"/root/pwn-{marker}"), Path(f"/etc/pwn-{marker}"), tmp_path / "pwn"]
    commands = "; ".join(f"echo {marker} > {t}" for t in targets)
    result = run(shell, f"{commands}; echo {marker} > /tmp/pwn-{marker}; echo {marker} > /dev/shm/pwn-{marker}; ls /tmp /dev/shm")
    for target in targets:
        assert not target.exists() or marker not in target.read_text(), f"{target} was written"
    assert result.output.count(f"pwn-{marker}") >= 2  # its own /tmp and /dev/shm took the files...
    assert not Path(f"/tmp/pwn-{marker}").exists() and not Path(f"/dev/shm/pwn-{marker}").exists()  # ...which the host never sees


def test_no_process_outlives_its_command(shell):
    """What happened: a background sleep, a setsid + nohup daemon and a double-forked orphan were
    all gone when the command returned (the jail's PID namespace ends with its first process)."""
    marker = f"{secrets.randbelow(10**6) + 10**6}"
    result = run(shell, f"sleep {marker} & setsid nohup sleep {marker}1 >/dev/null 2>&1 & (sleep {marker}2 &) ; disown -a; echo started")
    assert result.head.strip() == "started" and result.duration_s < 30
    time.sleep(0.5)
    assert processes_with(marker) == []


def test_the_timeout_kills_the_whole_command_tree(shell):
    """What happened: a command whose children ignore SIGTERM and keep the output pipe open was
    killed at its 2 s timeout, with every process it started; the output up to then came back."""
    marker = f"{secrets.randbelow(10**6) + 3 * 10**6}"
    result = run(shell, f"echo before; trap '' TERM; (trap '' TERM; sleep {marker}) & sleep {marker}", timeout_s=2)
    assert result.timed_out and 1.5 < result.duration_s < 15
    assert result.head.strip() == "before"
    assert processes_with(marker) == []


def test_long_output_is_cut_to_head_and_tail_with_the_count(shell):
    """What happened: 1,000,000 characters of output came back as the first and last 2,000 with the
    number left out between them (996,000)."""
    result = run(shell, "python -c \"import sys; sys.stdout.write('A' * 500000 + 'B' * 500000)\"")
    assert result.head == "A" * 2000 and result.tail == "B" * 2000
    assert result.elided_chars == 1_000_000 - 4000
    assert "[... 996000 characters elided ...]" in result.output


def test_signals_reach_only_the_jail(shell):
    """What happened: kill -9 -1 from the shell killed its own tree only; this test's process and a
    sleep of the same machine outside the jail lived on."""
    outside = psutil.Popen(["sleep", "300"])
    try:
        result = run(shell, f"kill -9 -1; kill -9 {os.getpid()} {outside.pid}; echo after")
        assert outside.is_running() and outside.status() != psutil.STATUS_ZOMBIE
        assert result.returncode != 0 or "No such process" in result.output
    finally:
        outside.kill()
        outside.wait()


def test_state_does_not_leak_between_episodes():
    """What happened: the first episode's files in its home, ~/.cache, /tmp and /dev/shm were not
    in the second episode's shell (a new sandbox folder, a new jail); the first one's folder is gone."""
    marker = secrets.token_hex(6)
    with Shell(LocalSandbox(), StandIn()) as first:
        run(first, f"mkdir -p ~/.cache && echo {marker} | tee leak.txt ~/.cache/leak /tmp/leak /dev/shm/leak")
        first_root = first.root
    assert not Path(first_root).exists()
    with Shell(LocalSandbox(), StandIn()) as second:
        result = run(second, f"cat leak.txt ~/.cache/leak /tmp/leak /dev/shm/leak; grep -rs {marker} / --exclude-dir=proc --exclude-dir=sys | head; echo checked")
    assert marker not in result.output and result.output.count("No such file") == 4


def test_abusing_the_tool_channel_breaks_nothing(shell):
    """What happened: garbage on kloop's command socket (no channel handed over, a channel with
    junk, an unknown command, a request far over the size limit, twenty calls at once) got an
    error or nothing, never a hang past the command; a normal call afterwards worked."""
    abuse = r'''
import json, os, socket
fd = int(os.environ["KLOOP_TOOL_FD"])
shared = socket.socket(fileno=os.dup(fd))
shared.send(b"no descriptor here")
def call(payload):
    a, b = socket.socketpair()
    socket.send_fds(shared, [b"x"], [b.fileno()])
    b.close()
    try:
        a.sendall(payload)
        a.shutdown(socket.SHUT_WR)
        a.settimeout(10)
        print(repr(a.recv(300)[:120]))
    except OSError as error:
        print("error", error)
call(b"{not json")
call(json.dumps({"tool": "rm -rf /", "file": "x", "source": ""}).encode())
call(json.dumps({"tool": "check", "file": "x", "source": "x" * 2000000}).encode())
call(json.dumps({"tool": "check", "file": "x", "source": "", "options": {"world": "eight"}}).encode())
'''
    shell.write("abuse.py", abuse)
    result = run(shell, "python abuse.py; for i in $(seq 20); do check abuse.py >/dev/null & done; wait; check abuse.py", timeout_s=60)
    assert "bad request" in result.output and not result.timed_out
    assert "check abuse.py:" in result.output
    assert all(r["tool"] == "check" for r in shell.commands.requests)


def test_the_shell_reads_torchs_shared_bytecode_and_cannot_write_it(monkeypatch, tmp_path):
    """Where torch ships without its bytecode, the shell's Python reads the folder the local sandbox
    compiled (sandbox.harness.bytecode), as candidate ranks do, and cannot add to it."""
    from sandbox.harness import bytecode

    monkeypatch.setenv(settings.CACHE_ROOT_ENV, str(tmp_path / "cache"))
    monkeypatch.setenv(bytecode.MODE_ENV, "always")
    with Shell(LocalSandbox(), StandIn(), output_limit_chars=4000) as shell:
        folder = bytecode.rank_bytecode()
        assert folder is not None
        result = run(shell, 'python -c "import os, sys, torch; c = torch.__spec__.cached; print(c.startswith(sys.pycache_prefix) and os.path.isfile(c))"; '
                            'touch "$PYTHONPYCACHEPREFIX/planted" && echo PLANTED', timeout_s=120)
        assert "True" in result.output and "PLANTED" not in result.output, result.output
        assert not (folder / "planted").exists()
