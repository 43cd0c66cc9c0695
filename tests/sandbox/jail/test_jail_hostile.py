"""Hostile probes against the jail, one per escape (tests/fixtures/jail_probes.py), each run three ways:
- "old": the confinement candidate ranks had before sandbox.jail (the local backend's
  session and env allow-list, then sandbox.harness.confine.confine as root: Landlock, an
  audit hook); the escapes it let through are asserted to get through there;
- "root": the jail started by root (the tree runs as 65534 in new namespaces);
- "user": the jail started by uid 65534 (user namespace path).
Every probe must be blocked in both jail modes. The world outside is real: a secret in a cache
folder, listeners (unix socket under /run, TCP on loopback and on this machine's own
non-loopback address, an abstract unix socket), a process of the tree's own uid to signal and
ptrace, a fake API key in the environment of the jail's parent.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from sandbox.backends.local import sandbox_env
from tests.sandbox.jail.support import NOBODY, PROJECT_ROOT, give_to_nobody, listener, non_loopback_address, run_driver

PROBES = Path(__file__).resolve().parents[2] / "fixtures" / "jail_probes.py"
MODES = ("old", "root", "user")
# what the old confinement let through (measured; the jail must block every probe)
OLD_ALLOWED = {
    "read_cache_secret", "read_etc_shadow", "read_parent_environ", "read_oracle", "connect_unix_socket_in_run",
    "connect_tcp_loopback_outside", "connect_tcp_non_loopback", "connect_abstract_unix_outside", "write_in_dev", "unshare",
    "setuid_root",
}
OLD_BLOCKED = {"signal_parent", "signal_same_uid_process_outside", "ptrace_parent", "ptrace_same_uid_process_outside",
               "write_outside_workdir", "mount"}
SHM_PROBE = "write_file_in_dev_shm"  # allowed everywhere; the question is whether the file outlives the jail
FAKE_KEY_NAME = "OPENAI_API_KEY"

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the probes compare root and unprivileged jails: run as root")


@pytest.fixture(scope="module")
def arena(tmp_path_factory):
    """The world outside the jail that the probes reach for."""
    token = secrets.token_hex(6)
    base = tmp_path_factory.mktemp("arena")
    compile_cache = base / "cache" / "compile"
    (compile_cache / "entry").mkdir(parents=True)
    secret = compile_cache / "entry" / "host.secret"
    secret.write_text(f"secret {token}")
    outside = base / "outside"
    outside.mkdir(mode=0o777)
    outside.chmod(0o777)  # writable by anyone: only the jail may refuse it
    lan = non_loopback_address()
    if lan is None:
        pytest.skip("this machine has no non-loopback IPv4 address to listen on")
    run_socket = f"/run/kloop-probe-{token}.sock"
    sockets = [listener(socket.AF_UNIX, run_socket), listener(socket.AF_INET, ("127.0.0.1", 0)),
               listener(socket.AF_INET, (lan, 0)), listener(socket.AF_UNIX, f"\0kloop-probe-{token}")]
    os.chmod(run_socket, 0o777)
    victim = subprocess.Popen(["sleep", "900"], user=NOBODY, group=NOBODY)
    oracle = next(Path(PROJECT_ROOT, "problems").rglob("oracle.py"))
    config = {
        "token": token, "cache_secret": str(secret), "compile_cache": str(compile_cache), "oracle": str(oracle),
        "run_socket": run_socket, "tcp_port": sockets[1].getsockname()[1], "lan_address": lan,
        "lan_port": sockets[2].getsockname()[1], "abstract_name": f"kloop-probe-{token}", "victim_pid": victim.pid,
        "outside_dir": str(outside), "parent_pid": "{driver_pid}",
    }
    yield {"config": config, "base": base, "victim": victim, "token": token}
    for sock in sockets:
        sock.close()
    os.unlink(run_socket)
    victim.kill()
    victim.wait()
    for leftover in (f"/dev/kloop-probe-{token}", f"/dev/shm/kloop-probe-{token}"):
        if os.path.exists(leftover):
            os.unlink(leftover)


def _run_probes(arena, mode: str) -> dict[str, str]:
    token, config = arena["token"], dict(arena["config"])
    workdir = arena["base"] / f"work-{mode}"
    workdir.mkdir()
    config["results"] = str(workdir / "results.json")
    driver_env = {FAKE_KEY_NAME: f"sk-fake-{token}"}
    run = {"spec": {"workdir": str(workdir), "env": {"PYTHONDONTWRITEBYTECODE": "1"}}, "timeout_s": 120}
    if mode == "old":
        run.update(old=True, argv=[sys.executable, str(PROBES), json.dumps(config), "--old"], old_env=sandbox_env(str(workdir), token))
    else:
        shutil.copy(PROBES, workdir / "probes.py")
        run["argv"] = [sys.executable, str(workdir / "probes.py"), json.dumps(config)]
        if mode == "user":
            give_to_nobody(workdir, workdir / "probes.py")
    out = run_driver(run, unprivileged=mode == "user", env=driver_env)
    verdicts = json.loads(Path(config["results"]).read_text())
    verdicts["victim_alive_after"] = arena["victim"].poll() is None
    shm_file = Path(f"/dev/shm/kloop-probe-{token}")
    verdicts["dev_shm_file_after"] = shm_file.exists()
    shm_file.unlink(missing_ok=True)
    outside_file = Path(config["outside_dir"]) / f"pwned-{token}"
    verdicts["outside_file_after"] = outside_file.exists()
    outside_file.unlink(missing_ok=True)
    verdicts["measures"] = out.get("measures", [])
    return verdicts


@pytest.fixture(scope="module")
def verdicts(arena) -> dict[str, dict]:
    found = {mode: _run_probes(arena, mode) for mode in MODES}
    for mode, results in found.items():
        print(f"\n[{mode}] measures: {results['measures']}")
        for name in sorted(OLD_ALLOWED | OLD_BLOCKED | {SHM_PROBE}):
            print(f"[{mode}] {name}: {results[name]}")
    return found


@pytest.mark.parametrize("probe", sorted(OLD_ALLOWED | OLD_BLOCKED))
def test_probe_is_blocked_in_the_jail(verdicts, probe):
    old = verdicts["old"][probe]
    assert old.startswith("allowed" if probe in OLD_ALLOWED else "blocked"), f"old confinement: {old}"
    for mode in ("root", "user"):
        assert verdicts[mode][probe].startswith("blocked"), f"{mode} jail: {verdicts[mode][probe]}"


def test_the_probes_cover_every_escape():
    sys.path.insert(0, str(PROBES.parent))
    from jail_probes import probes

    assert set(probes({})) == OLD_ALLOWED | OLD_BLOCKED | {SHM_PROBE}


@pytest.mark.parametrize("mode", ("root", "user"))
def test_nothing_outside_was_touched(verdicts, mode):
    assert verdicts[mode]["victim_alive_after"]
    assert not verdicts[mode]["outside_file_after"]


def test_a_file_left_in_dev_shm_is_gone_with_the_jail(verdicts):
    for mode in MODES:
        assert verdicts[mode][SHM_PROBE].startswith("allowed"), verdicts[mode][SHM_PROBE]
    assert verdicts["old"]["dev_shm_file_after"], "the old confinement's file should have stayed"
    assert not verdicts["root"]["dev_shm_file_after"] and not verdicts["user"]["dev_shm_file_after"]


@pytest.mark.parametrize("mode", ("root", "user"))
def test_the_jail_reports_every_measure(verdicts, mode):
    measures = set(verdicts[mode]["measures"])
    expected = {"pid-namespace", "mount-namespace", "net-namespace", "ipc-namespace", "private-tmp", "private-shm",
                "private-proc", "hidden-run", "caps-dropped", "no-new-privs", "seccomp", "user:65534", "landlock-net",
                "landlock-scope-signal", "landlock-scope-abstract-unix", "rlimits"} | ({"oom-first"} if mode == "root" else set())
    assert expected <= measures, expected - measures
    assert ("user-namespace" in measures) == (mode == "user")

