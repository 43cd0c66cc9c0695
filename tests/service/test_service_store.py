"""The job store, tokens and keys of the service, in process (no server)."""

import os
import sqlite3
import threading

import pytest

from service.auth import Limits, TokenError, bearer, create_token, digest, lookup
from service.keys import KeysFileError, load_keys_file, redactor
from service.store import QueueFull, Store


@pytest.fixture
def store(tmp_path):
    store = Store(tmp_path / "jobs.db")
    yield store
    store.close()


def test_a_token_is_stored_hashed_and_found_by_its_secret(store, tmp_path):
    secret = create_token(store, "alice", Limits(max_running=2))
    assert secret.startswith("kl_") and len(secret) > 40
    raw = sqlite3.connect(tmp_path / "jobs.db").execute("SELECT hash FROM tokens").fetchall()
    assert raw == [(digest(secret),)] and secret not in (tmp_path / "jobs.db").read_bytes().decode(errors="replace")
    assert lookup(store, secret).name == "alice" and lookup(store, secret).max_running == 2
    assert lookup(store, secret + "x") is None and lookup(store, None) is None and lookup(store, "nope") is None
    with pytest.raises(TokenError, match="exists already"):
        create_token(store, "alice")
    with pytest.raises(TokenError, match="use 1-64"):
        create_token(store, "a b")
    assert store.revoke_token("alice") and lookup(store, secret) is None
    assert bearer("Bearer abc") == "abc" and bearer("Basic abc") is None and bearer(None) is None


def test_jobs_are_claimed_in_order_within_each_tokens_running_limit(store):
    create_token(store, "one", Limits(max_running=1))
    create_token(store, "two", Limits(max_running=2))
    a1, _ = store.submit("eval", "one", {"n": 1})
    a2, _ = store.submit("eval", "one", {"n": 2})
    b1, _ = store.submit("run", "two", {"n": 3})
    b2, _ = store.submit("eval", "two", {"n": 4})
    assert store.claim_next().id == a1.id
    assert store.claim_next().id == b1.id  # a2 waits: "one" has a job running
    assert store.claim_next(("run",)) is None  # no queued run
    assert store.claim_next(("eval",)).id == b2.id
    assert store.claim_next() is None
    assert store.finish(a1.id, "done", {"ok": True}) and not store.finish(a1.id, "failed")
    assert store.claim_next().id == a2.id
    assert store.get(a1.id).result == {"ok": True} and store.get(a2.id).attempts == 1


def test_concurrent_claims_never_hand_out_a_job_twice(store):
    ids = {store.submit("eval", "x", {"n": n})[0].id for n in range(60)}
    claimed, lock = [], threading.Lock()

    def worker():
        while (job := store.claim_next()) is not None:
            with lock:
                claimed.append(job.id)

    threads = [threading.Thread(target=worker) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(claimed) == sorted(ids)


def test_idempotency_key_and_queue_limit(store):
    first, created = store.submit("eval", "x", {"n": 1}, idempotency_key="k1")
    again, created_again = store.submit("eval", "x", {"n": 2}, idempotency_key="k1")
    assert created and not created_again and again.id == first.id and again.request == {"n": 1}
    other, created_other = store.submit("eval", "y", {"n": 1}, idempotency_key="k1")  # keys are per token
    assert created_other and other.id != first.id
    with pytest.raises(QueueFull, match="queued already"):
        store.submit("eval", "x", {"n": 3}, max_queued=1)


def test_recover_requeues_or_interrupts_what_was_running(store):
    evaluation, _ = store.submit("eval", "x", {})
    run, _ = store.submit("run", "x", {})
    cancelled, _ = store.submit("run", "x", {})
    finished, _ = store.submit("eval", "x", {})
    for _ in range(4):
        store.claim_next()
    store.finish(finished.id, "done", {"verdict": "correct"})
    store.request_cancel(cancelled.id)
    outcome = store.recover(("eval", "batch"))
    assert outcome == {"requeued": [evaluation.id], "interrupted": [run.id], "cancelled": [cancelled.id], "failed": []}
    assert [store.get(j.id).status for j in (evaluation, run, cancelled, finished)] == ["queued", "interrupted", "cancelled", "done"]
    assert store.get(finished.id).result == {"verdict": "correct"}
    store.claim_next()  # it keeps killing the server: failed after MAX_ATTEMPTS, never an endless loop
    assert store.recover(("eval",))["requeued"] == [evaluation.id]
    store.claim_next()
    assert store.recover(("eval",))["failed"] == [evaluation.id] and "died 3 times" in store.get(evaluation.id).error


def test_records_are_redacted_of_the_servers_keys(tmp_path):
    store = Store(tmp_path / "jobs.db", redact=redactor({"OPENAI_API_KEY": "sk-very-secret-123", "PATH": "/usr/bin:/bin"}))
    job, _ = store.submit("run", "x", {})
    store.add_event(job.id, "step", {"message": "401 for key sk-very-secret-123"})
    store.claim_next()
    store.finish(job.id, "failed", {"log": "sk-very-secret-123"}, "bad key sk-very-secret-123")
    text = (tmp_path / "jobs.db").read_bytes() + b"".join(p.read_bytes() for p in tmp_path.glob("jobs.db-*"))
    assert b"sk-very-secret-123" not in text
    assert store.get(job.id).error == "bad key [redacted]" and store.events(job.id)[0].data["message"].endswith("[redacted]")
    store.close()


def test_keys_file(tmp_path, monkeypatch):
    path = tmp_path / "keys"
    path.write_text("# provider keys\nexport KLOOP_TEST_API_KEY='sk-from-file-0001'\nKLOOP_TEST_OTHER=plain\n")
    path.chmod(0o644)
    with pytest.raises(KeysFileError, match="chmod 600"):
        load_keys_file(path)
    path.chmod(0o600)
    monkeypatch.setenv("KLOOP_TEST_API_KEY", "")
    assert load_keys_file(path) == {"KLOOP_TEST_API_KEY": "sk-from-file-0001", "KLOOP_TEST_OTHER": "plain"}
    assert os.environ["KLOOP_TEST_API_KEY"] == "sk-from-file-0001"
    path.write_text("not a line\n")
    with pytest.raises(KeysFileError, match=":1: expected NAME=value"):
        load_keys_file(path)


def test_a_job_is_its_tokens_and_an_admin_token_sees_all(tmp_path):
    """A store made before tokens had an admin column opens (its tokens see their own jobs only)."""
    old = sqlite3.connect(tmp_path / "jobs.db")
    old.executescript("CREATE TABLE tokens (name TEXT PRIMARY KEY, hash TEXT NOT NULL UNIQUE, created_at REAL NOT NULL, "
                      "max_running INTEGER NOT NULL, max_queued INTEGER NOT NULL, max_body_bytes INTEGER NOT NULL, "
                      "revoked INTEGER NOT NULL DEFAULT 0);")
    old.execute("INSERT INTO tokens VALUES ('old', ?, 0, 1, 1, 1, 0)", (digest("kl_old-secret"),))
    old.commit()
    old.close()
    store = Store(tmp_path / "jobs.db")
    try:
        before = lookup(store, "kl_old-secret")
        assert before.name == "old" and before.admin is False
        admin = lookup(store, create_token(store, "operator", admin=True))
        alice = lookup(store, create_token(store, "alice"))
        job, _ = store.submit("eval", "alice", {"problem": "x"})
        assert alice.may_see(job) and admin.may_see(job) and not before.may_see(job)
        assert store.counts("alice") == {"queued": 1} and store.counts("old") == {}
    finally:
        store.close()


def test_a_job_submitted_while_a_worker_finds_the_queue_empty_starts_at_once(store):
    """The submit's wake lands between a worker's empty claim and its wait: the worker claims again
    at once instead of sleeping its whole poll interval (a lost wake-up held an evaluation ~1 s)."""
    from service.scheduler import Scheduler

    started = threading.Event()
    scheduler = Scheduler(store, {"eval": lambda job, control: started.set()}, {("eval",): 1}, poll_s=30.0)
    claim = store.claim_next
    raced = []

    def claim_racing_a_submit(kinds=None):
        job = claim(kinds)
        if job is None and not raced:  # the queue looked empty; a client submits right now, before the worker waits
            raced.append(store.submit("eval", "alice", {"n": 1})[0])
            scheduler.wake()
        return job

    store.claim_next = claim_racing_a_submit
    scheduler.start()
    try:
        assert started.wait(5.0), "the worker slept through the wake-up"
    finally:
        scheduler.stop(5.0)
    assert raced and store.get(raced[0].id).status == "done"
