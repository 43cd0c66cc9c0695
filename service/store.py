"""The durable job store: SQLite in WAL mode, one file, nothing else to install.

A job is committed (``synchronous=FULL``) before the API replies with its id, so a job accepted
survives a ``kill -9`` of the server. Tables: ``jobs`` (one row a job: its request, status,
result), ``events`` (what a job reported as it went: the per-step verdicts the SSE stream and the
web page replay) and ``tokens`` (API tokens, their SHA-256 only, their limits, and ``admin``: a
token that sees every token's jobs; any other sees only its own).

Statuses: ``queued`` -> ``running`` -> ``done`` | ``failed`` | ``cancelled`` | ``interrupted``.
``recover()`` (at every start) deals with what a dead server left ``running``.
"""

from __future__ import annotations

import json
import secrets
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

JobKind = str  # "eval" | "run" | "batch"
TERMINAL = ("done", "failed", "cancelled", "interrupted")
STATUSES = ("queued", "running", *TERMINAL)
MAX_ATTEMPTS = 3  # a job that was running when the server died this many times is failed, not run again

SCHEMA = """
CREATE TABLE IF NOT EXISTS tokens (
    name TEXT PRIMARY KEY,
    hash TEXT NOT NULL UNIQUE,
    created_at REAL NOT NULL,
    max_running INTEGER NOT NULL,
    max_queued INTEGER NOT NULL,
    max_body_bytes INTEGER NOT NULL,
    revoked INTEGER NOT NULL DEFAULT 0,
    admin INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS jobs (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    kind TEXT NOT NULL,
    owner TEXT NOT NULL,
    idempotency_key TEXT,
    title TEXT NOT NULL DEFAULT '',
    request TEXT NOT NULL,
    status TEXT NOT NULL,
    result TEXT,
    error TEXT,
    attempts INTEGER NOT NULL DEFAULT 0,
    cancel_requested INTEGER NOT NULL DEFAULT 0,
    created_at REAL NOT NULL,
    started_at REAL,
    finished_at REAL,
    UNIQUE (owner, idempotency_key)
);
CREATE INDEX IF NOT EXISTS jobs_status ON jobs (status, seq);
CREATE TABLE IF NOT EXISTS events (
    job_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    at REAL NOT NULL,
    type TEXT NOT NULL,
    data TEXT NOT NULL,
    PRIMARY KEY (job_id, seq)
);
"""


@dataclass
class Job:
    id: str
    seq: int
    kind: JobKind
    owner: str
    title: str
    request: dict[str, Any]
    status: str
    result: Any = None
    error: str | None = None
    attempts: int = 0
    cancel_requested: bool = False
    created_at: float = 0.0
    started_at: float | None = None
    finished_at: float | None = None

    @property
    def finished(self) -> bool:
        return self.status in TERMINAL

    def public(self, with_request: bool = True) -> dict[str, Any]:
        """What the API shows of a job."""
        data = {"id": self.id, "kind": self.kind, "status": self.status, "title": self.title, "owner": self.owner,
                "created_at": self.created_at, "started_at": self.started_at, "finished_at": self.finished_at,
                "attempts": self.attempts, "error": self.error, "result": self.result}
        if with_request:
            data["request"] = self.request
        return data


@dataclass
class Event:
    job_id: str
    seq: int
    at: float
    type: str
    data: dict[str, Any] = field(default_factory=dict)


@dataclass
class TokenRecord:
    name: str
    created_at: float
    max_running: int
    max_queued: int
    max_body_bytes: int
    revoked: bool
    admin: bool = False

    def may_see(self, job: Job) -> bool:
        """A job is its owner's: another token is answered as if it did not exist (an admin token sees all)."""
        return self.admin or job.owner == self.name


class QueueFull(Exception):
    """The token has as many queued jobs as it may."""


def _job(row: sqlite3.Row) -> Job:
    return Job(id=row["id"], seq=row["seq"], kind=row["kind"], owner=row["owner"], title=row["title"],
               request=json.loads(row["request"]), status=row["status"],
               result=json.loads(row["result"]) if row["result"] is not None else None, error=row["error"],
               attempts=row["attempts"], cancel_requested=bool(row["cancel_requested"]), created_at=row["created_at"],
               started_at=row["started_at"], finished_at=row["finished_at"])


def _token(row: sqlite3.Row) -> TokenRecord:
    return TokenRecord(name=row["name"], created_at=row["created_at"], max_running=row["max_running"], max_queued=row["max_queued"],
                       max_body_bytes=row["max_body_bytes"], revoked=bool(row["revoked"]),
                       admin=bool(row["admin"]))


class Store:
    """Thread-safe: one connection, one lock; every write is one committed transaction."""

    def __init__(self, path: str | Path, redact: Callable[[str], str] | None = None):
        """``redact`` is applied to every result, error and event written (the server's API keys
        never reach a record, whatever a provider's error message says)."""
        self.path = Path(path)
        self.redact = redact or (lambda text: text)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None, timeout=30)
        self._db.row_factory = sqlite3.Row
        self._lock = threading.RLock()
        self._listeners: list[Callable[[str], None]] = []
        with self._lock:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")  # a commit is on disk before the reply that follows it
            self._db.execute("PRAGMA foreign_keys=ON")
            self._db.executescript(SCHEMA)
            columns = {row[1] for row in self._db.execute("PRAGMA table_info(tokens)")}
            if "admin" not in columns:  # a store made before tokens had owners' views
                self._db.execute("ALTER TABLE tokens ADD COLUMN admin INTEGER NOT NULL DEFAULT 0")

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def _write(self, sql: str, args: Iterable[Any] = ()) -> sqlite3.Cursor:
        with self._lock:
            return self._db.execute(sql, tuple(args))

    def _read(self, sql: str, args: Iterable[Any] = ()) -> list[sqlite3.Row]:
        with self._lock:
            return self._db.execute(sql, tuple(args)).fetchall()

    def listen(self, listener: Callable[[str], None]) -> Callable[[], None]:
        """``listener(job_id)`` is called (in the writing thread) after each event written for a job
        (a job's status changes come with one, written just after its row); returns what stops it."""
        with self._lock:
            self._listeners.append(listener)
        return lambda: self._unlisten(listener)

    def _unlisten(self, listener: Callable[[str], None]) -> None:
        with self._lock:
            self._listeners.remove(listener)

    def _written(self, job_id: str) -> None:
        with self._lock:
            listeners = list(self._listeners)
        for listener in listeners:
            listener(job_id)

    # tokens

    def add_token(self, name: str, digest: str, max_running: int, max_queued: int, max_body_bytes: int, admin: bool = False) -> None:
        self._write("INSERT INTO tokens (name, hash, created_at, max_running, max_queued, max_body_bytes, admin) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?)", (name, digest, time.time(), max_running, max_queued, max_body_bytes, int(admin)))

    def token_by_hash(self, digest: str) -> TokenRecord | None:
        rows = self._read("SELECT * FROM tokens WHERE hash = ? AND revoked = 0", (digest,))
        return _token(rows[0]) if rows else None

    def tokens(self) -> list[TokenRecord]:
        return [_token(row) for row in self._read("SELECT * FROM tokens ORDER BY created_at")]

    def revoke_token(self, name: str) -> bool:
        return self._write("UPDATE tokens SET revoked = 1 WHERE name = ? AND revoked = 0", (name,)).rowcount > 0

    # jobs

    def submit(self, kind: JobKind, owner: str, request: dict[str, Any], title: str = "", idempotency_key: str | None = None,
               max_queued: int | None = None) -> tuple[Job, bool]:
        """Store a new queued job, committed before this returns: (job, True). With an
        ``idempotency_key`` the owner used before, the job made then: (job, False)."""
        with self._lock:
            if idempotency_key is not None:
                rows = self._db.execute("SELECT * FROM jobs WHERE owner = ? AND idempotency_key = ?", (owner, idempotency_key)).fetchall()
                if rows:
                    return _job(rows[0]), False
            if max_queued is not None:
                queued = self._db.execute("SELECT COUNT(*) FROM jobs WHERE owner = ? AND status = 'queued'", (owner,)).fetchone()[0]
                if queued >= max_queued:
                    raise QueueFull(f"{queued} jobs of this token are queued already, the most it may have; wait for some to finish")
            job_id = f"{kind}-{secrets.token_hex(6)}"
            self._db.execute("INSERT INTO jobs (id, kind, owner, idempotency_key, title, request, status, created_at) "
                             "VALUES (?, ?, ?, ?, ?, ?, 'queued', ?)",
                             (job_id, kind, owner, idempotency_key, title, json.dumps(request), time.time()))
            return self.get(job_id), True

    def get(self, job_id: str) -> Job | None:
        rows = self._read("SELECT * FROM jobs WHERE id = ?", (job_id,))
        return _job(rows[0]) if rows else None

    def list(self, owner: str | None = None, status: str | None = None, limit: int = 200) -> list[Job]:
        where, args = [], []
        if owner is not None:
            where.append("owner = ?")
            args.append(owner)
        if status is not None:
            where.append("status = ?")
            args.append(status)
        clause = f"WHERE {' AND '.join(where)}" if where else ""
        return [_job(row) for row in self._read(f"SELECT * FROM jobs {clause} ORDER BY seq DESC LIMIT ?", (*args, limit))]

    def counts(self, owner: str | None = None) -> dict[str, int]:
        """Jobs by status: every job's, or ``owner``'s."""
        where, args = ("WHERE owner = ?", (owner,)) if owner is not None else ("", ())
        return {row[0]: row[1] for row in self._read(f"SELECT status, COUNT(*) FROM jobs {where} GROUP BY status", args)}

    def claim_next(self, kinds: Iterable[str] | None = None) -> Job | None:
        """The oldest queued job whose owner is under its running limit, now ``running``."""
        kinds = tuple(kinds) if kinds else None
        kind_clause = f"AND j.kind IN ({','.join('?' * len(kinds))})" if kinds else ""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                row = self._db.execute(
                    "SELECT j.id FROM jobs j LEFT JOIN tokens t ON t.name = j.owner WHERE j.status = 'queued' "
                    f"{kind_clause} AND (SELECT COUNT(*) FROM jobs r WHERE r.owner = j.owner AND r.status = 'running') "
                    "< COALESCE(t.max_running, 1 << 30) ORDER BY j.seq LIMIT 1", kinds or ()).fetchone()
                if row is None:
                    self._db.execute("COMMIT")
                    return None
                self._db.execute("UPDATE jobs SET status = 'running', started_at = ?, attempts = attempts + 1 WHERE id = ?",
                                 (time.time(), row["id"]))
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
        return self.get(row["id"])

    def finish(self, job_id: str, status: str, result: Any = None, error: str | None = None) -> bool:
        """End a running (or queued) job; False when it had ended already."""
        assert status in TERMINAL, status
        cursor = self._write("UPDATE jobs SET status = ?, result = ?, error = ?, finished_at = ? WHERE id = ? AND status IN ('queued', 'running')",
                             (status, None if result is None else self.redact(json.dumps(result, default=str)),
                             None if error is None else self.redact(error), time.time(), job_id))
        return cursor.rowcount > 0

    def request_cancel(self, job_id: str) -> tuple[Job | None, bool]:
        """Cancel a queued job at once (``cancelled``; True) or mark a running one for its worker to end."""
        with self._lock:
            cursor = self._db.execute("UPDATE jobs SET status = 'cancelled', finished_at = ?, cancel_requested = 1 "
                                      "WHERE id = ? AND status = 'queued'", (time.time(), job_id))
            self._db.execute("UPDATE jobs SET cancel_requested = 1 WHERE id = ? AND status = 'running'", (job_id,))
        return self.get(job_id), cursor.rowcount > 0

    def recover(self, rerun_kinds: Iterable[str] = ("eval", "batch")) -> dict[str, list[str]]:
        """After a server died: each job left ``running`` is queued again if its kind is in
        ``rerun_kinds`` (and it has not died there MAX_ATTEMPTS times), cancelled if a cancel was
        asked for, else ``interrupted`` (its partial result is filled in by the caller)."""
        rerun_kinds = tuple(rerun_kinds)
        done: dict[str, list[str]] = {"requeued": [], "interrupted": [], "cancelled": [], "failed": []}
        now = time.time()
        for job in self.list(status="running", limit=1 << 30):
            if job.cancel_requested:
                outcome = "cancelled"
            elif job.kind in rerun_kinds:
                outcome = "requeued" if job.attempts < MAX_ATTEMPTS else "failed"
            else:
                outcome = "interrupted"
            if outcome == "requeued":
                self._write("UPDATE jobs SET status = 'queued', started_at = NULL WHERE id = ?", (job.id,))
            else:
                error = f"the server died {job.attempts} times while this job ran; not run again" if outcome == "failed" else job.error
                self._write("UPDATE jobs SET status = ?, finished_at = ?, error = ? WHERE id = ?", (outcome, now, error, job.id))
            self.add_event(job.id, "status", {"status": "queued" if outcome == "requeued" else outcome, "recovered": True})
            done[outcome].append(job.id)
        return done

    def set_result(self, job_id: str, result: Any) -> None:
        self._write("UPDATE jobs SET result = ? WHERE id = ?", (self.redact(json.dumps(result, default=str)), job_id))

    # events

    def add_event(self, job_id: str, type_: str, data: dict[str, Any]) -> int:
        with self._lock:
            last = self._db.execute("SELECT COALESCE(MAX(seq), 0) FROM events WHERE job_id = ?", (job_id,)).fetchone()[0]
            self._db.execute("INSERT INTO events (job_id, seq, at, type, data) VALUES (?, ?, ?, ?, ?)",
                             (job_id, last + 1, time.time(), type_, self.redact(json.dumps(data, default=str))))
        self._written(job_id)
        return last + 1

    def events(self, job_id: str, after: int = 0, type_: str | None = None) -> list[Event]:
        sql, args = "SELECT * FROM events WHERE job_id = ? AND seq > ?", [job_id, after]
        if type_ is not None:
            sql += " AND type = ?"
            args.append(type_)
        return [Event(job_id=row["job_id"], seq=row["seq"], at=row["at"], type=row["type"], data=json.loads(row["data"]))
                for row in self._read(sql + " ORDER BY seq", args)]
