"""``kloop serve token create|list|revoke`` as a user runs them: the secret printed once and stored
only hashed, clear one-line errors for a taken or bad name, and a revoked token refused."""

import os
import sqlite3
import subprocess
import sys

from tests.support.service import ROOT


def kloop(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "agent", *args], capture_output=True, text=True, cwd=ROOT, timeout=120,
                          env={**os.environ, "COLUMNS": "200"})


def test_token_create_prints_a_secret_stored_only_hashed(tmp_path):
    from service.auth import digest, lookup
    from service.store import Store

    db = tmp_path / "jobs.db"
    made = kloop("serve", "token", "create", "alice", "--db", str(db), "--max-running", "2", "--max-body-bytes", "1000")
    assert made.returncode == 0, made.stderr
    secret = made.stdout.strip()
    assert secret.startswith("kl_") and len(secret.splitlines()) == 1 and len(secret) > 40
    rows = sqlite3.connect(db).execute("SELECT name, hash, max_running, max_body_bytes FROM tokens").fetchall()
    assert rows == [("alice", digest(secret), 2, 1000)]
    assert all(secret.encode() not in path.read_bytes() for path in tmp_path.iterdir() if path.is_file())
    store = Store(db)
    assert lookup(store, secret).name == "alice"
    store.close()

    again = kloop("serve", "token", "create", "alice", "--db", str(db))
    assert again.returncode == 2 and "a token named 'alice' exists already" in again.stderr and "Traceback" not in again.stderr
    bad = kloop("serve", "token", "create", "no spaces please", "--db", str(db))
    assert bad.returncode == 2 and "use 1-64 letters" in bad.stderr and "Traceback" not in bad.stderr

    listed = kloop("serve", "token", "list", "--db", str(db))
    assert listed.returncode == 0 and "alice" in listed.stdout and "active" in listed.stdout and secret not in listed.stdout
    assert kloop("serve", "token", "revoke", "alice", "--db", str(db)).returncode == 0
    store = Store(db)
    assert lookup(store, secret) is None
    store.close()
    missing = kloop("serve", "token", "revoke", "alice", "--db", str(db))
    assert missing.returncode == 2 and "no active token named 'alice'" in missing.stderr


def test_a_port_in_use_or_out_of_range_is_a_one_line_error(tmp_path):
    import socket

    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        busy = kloop("serve", "--port", str(port), "--db", str(tmp_path / "jobs.db"), "--gpus", "")
    assert busy.returncode == 2 and "Traceback" not in busy.stderr, busy.stderr
    assert f"cannot listen on 127.0.0.1:{port}: Address already in use" in busy.stderr
    assert "kloop serve: http" not in busy.stdout  # nothing claims to serve
    wrong = kloop("serve", "--port", "70000", "--db", str(tmp_path / "jobs.db"))
    assert wrong.returncode == 2 and "Traceback" not in wrong.stderr and "--port" in wrong.stderr
