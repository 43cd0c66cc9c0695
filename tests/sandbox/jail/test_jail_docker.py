"""The jail inside the Docker sandbox (non-root user, no capabilities, Docker's default seccomp
profile: no namespaces). It must fall back to Landlock, no_new_privs, seccomp and rlimits, end
the tree by a scoped kill(-1), and say what did not hold. The hostile probes of
tests/fixtures/jail_probes.py run there against listeners and processes of the same uid."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from tests.support.docker import docker_client, no_container_left, test_image  # noqa: F401 - fixtures
from tests.sandbox.jail.test_jail import DAEMON

pytestmark = pytest.mark.docker

# In the container: set up the world outside the jail, run the probes in one jail and a
# daemon in another, print what happened. Re-executes itself to hold a fake API key in its
# environment (the sandbox never passes credential-like variables in).
RUNNER = r"""
import json, os, secrets, socket, subprocess, sys, time
if "OPENAI_API_KEY" not in os.environ:
    os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, "OPENAI_API_KEY": "sk-fake-" + secrets.token_hex(6)})
from sandbox.jail import Jail, JailSpec

token = os.environ["OPENAI_API_KEY"][len("sk-fake-"):]
def listen(family, address):
    sock = socket.socket(family, socket.SOCK_STREAM); sock.bind(address); sock.listen(8); return sock
work = "/work/jailed"
os.makedirs(work, exist_ok=True)
open("/cache/host.secret", "w").write("secret " + token)
os.makedirs("/tmp/outside", mode=0o777, exist_ok=True)
sockets = [listen(socket.AF_UNIX, f"/tmp/kloop-probe-{token}.sock"), listen(socket.AF_INET, ("127.0.0.1", 0)),
           listen(socket.AF_UNIX, f"\0kloop-probe-{token}")]
victim = subprocess.Popen(["sleep", "600"])
oracle = next(p for p in (os.path.join(r, "oracle.py") for r, _, f in os.walk("/opt/kloop/lib/problems")) if os.path.exists(p))
config = {"token": token, "cache_secret": "/cache/host.secret", "oracle": oracle, "run_socket": sockets[0].getsockname(),
          "tcp_port": sockets[1].getsockname()[1], "lan_address": "10.0.0.1", "lan_port": 80,
          "abstract_name": f"kloop-probe-{token}", "victim_pid": victim.pid, "outside_dir": "/tmp/outside",
          "parent_pid": os.getpid(), "results": work + "/results.json"}
jail = Jail.start(JailSpec(workdir=work), [sys.executable, "probes.py", json.dumps(config)])
out = {"measures": jail.measures, "gaps": jail.gaps, "returncode": jail.wait(120)}
out["probes"] = json.load(open(config["results"]))
out["victim_alive"] = victim.poll() is None
out["shm_file_after"] = os.path.exists(f"/dev/shm/kloop-probe-{token}")
out["outside_file_after"] = os.path.exists(f"/tmp/outside/pwned-{token}")
daemon = Jail.start(JailSpec(workdir=work), [sys.executable, "daemon.py", token, "exit"])
out["daemon_returncode"] = daemon.wait(60)
out["daemon_ready"] = os.path.exists(work + "/daemon-ready")
time.sleep(0.2)
def alive_with_token(pid):
    try:
        state = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
        return state != "Z" and token.encode() in open(f"/proc/{pid}/cmdline", "rb").read()
    except OSError:
        return False
out["left"] = [p for p in os.listdir("/proc") if p.isdigit() and alive_with_token(p)]
victim.kill()
print(json.dumps(out))
"""
EXPECTED = {"no-new-privs", "seccomp", "caps-dropped", "rlimits", "scoped-kill", "landlock-fs-abi7", "landlock-net",
            "landlock-scope-signal", "landlock-scope-abstract-unix", "own-session", "user:10001"}


@pytest.fixture(scope="module")
def outcome(test_image, docker_client):
    from sandbox.backends.docker import DockerSandbox

    with DockerSandbox(image=test_image, cache_volume=None, memory="4g", pids=512, work_size="1g") as sandbox:
        sandbox.write_file("runner.py", RUNNER)
        sandbox.write_file("jailed/probes.py", Path(__file__).resolve().parents[2].joinpath("fixtures", "jail_probes.py").read_text())
        sandbox.write_file("jailed/daemon.py", textwrap.dedent(DAEMON))
        result = sandbox.exec(["python3", "runner.py"], timeout_s=300)
    assert result.returncode == 0, result.stdout + result.stderr
    found = json.loads(result.stdout.strip().splitlines()[-1])
    print(json.dumps(found, indent=1))
    return found


def test_the_jail_falls_back_to_what_docker_allows(outcome):
    measures = set(outcome["measures"])
    assert EXPECTED <= measures, EXPECTED - measures
    assert not measures & {"pid-namespace", "mount-namespace", "net-namespace", "user-namespace", "private-tmp"}
    gaps = " | ".join(outcome["gaps"])
    assert "only TCP is blocked" in gaps and "by its path" in gaps
    assert "processes" not in gaps and "signal" not in gaps and "abstract" not in gaps


def test_every_escape_but_a_listening_pathname_socket_is_blocked(outcome):
    probes = outcome["probes"]
    assert probes["connect_unix_socket_in_run"].startswith("allowed")  # the reported gap
    escaped = {name: v for name, v in probes.items()
               if v.startswith("allowed") and name not in ("connect_unix_socket_in_run", "write_file_in_dev_shm")}
    assert escaped == {}
    assert outcome["victim_alive"] and not outcome["outside_file_after"]


def test_a_daemon_is_ended_by_the_scoped_kill(outcome):
    assert outcome["daemon_returncode"] == 0 and outcome["daemon_ready"]
    assert outcome["left"] == []
