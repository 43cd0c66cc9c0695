"""A job's event stream (service.events.job_events) on a real SQLite store: a write wakes it at
once, not at its next poll, and it ends when the job does."""

import threading
import time

import anyio

from service.events import job_events
from service.store import Store

POLL_S = 30.0  # far longer than the waits below: only a wake-up can deliver in time


def _write_later(store: Store, job_id: str) -> None:
    time.sleep(0.5)
    store.add_event(job_id, "step", {"step": 1})
    time.sleep(0.5)
    store.finish(job_id, "done")
    store.add_event(job_id, "status", {"status": "done"})


def test_a_stream_wakes_when_its_job_is_written_and_ends_with_it(tmp_path):
    store = Store(tmp_path / "jobs.db")
    job, _ = store.submit("eval", "tester", {"problem": "all_reduce"})
    other, _ = store.submit("eval", "tester", {"problem": "broadcast"})
    seen: list[tuple[float, str]] = []

    async def follow() -> None:
        started = time.monotonic()
        with anyio.fail_after(10):
            async for chunk in job_events(store, job.id, poll_s=POLL_S):
                kind = next((line.removeprefix("event: ") for line in chunk.splitlines() if line.startswith("event: ")), None)
                if kind:
                    seen.append((time.monotonic() - started, kind))

    writer = threading.Thread(target=_write_later, args=(store, job.id))
    store.add_event(other.id, "step", {"step": 1})  # another job's writes reach no stream of this one
    writer.start()
    anyio.run(follow)
    writer.join()
    assert [kind for _, kind in seen] == ["step", "status", "end"]
    assert seen[0][0] >= 0.4 and seen[-1][0] < 5.0, seen
    assert store._listeners == []  # the stream stopped listening when it ended
    store.close()


def test_a_client_that_leaves_stops_its_stream_listening(tmp_path):
    """The API's event stream (uvicorn on loopback, the real app; no worker runs, so the job stays
    queued and its stream open) listens while a client reads, with the security headers, and stops
    when the client leaves. The client keeps its line iterator until it leaves: a dropped httpx
    iterator closes the connection (that made an earlier version of this test flaky under load)."""
    import socket

    import httpx
    import uvicorn

    from service.api import create_app
    from service.auth import create_token
    from service.server import Service, ServerSettings

    service = Service(ServerSettings(db=tmp_path / "jobs.db", cpu_slots=1))
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(create_app(service), host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while not server.started and time.monotonic() < deadline:
            time.sleep(0.05)
        token = create_token(service.store, "tester")
        job, _ = service.store.submit("eval", "tester", {"problem": "all_reduce"})
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", headers={"Authorization": f"Bearer {token}"}) as client:
            for _ in range(10):
                with client.stream("GET", f"/v1/jobs/{job.id}/events", timeout=30) as stream:
                    assert stream.status_code == 200
                    assert stream.headers["x-content-type-options"] == "nosniff" and "content-security-policy" in stream.headers
                    lines = stream.iter_lines()
                    assert next(lines).startswith(": stream of job")
                    assert len(service.store._listeners) == 1
                    del lines  # leaving: the connection closes
                deadline = time.monotonic() + 10
                while service.store._listeners and time.monotonic() < deadline:
                    time.sleep(0.05)
                assert service.store._listeners == []
            assert "content-security-policy" in client.get("/login").headers
            assert "content-security-policy" not in client.get("/v1/docs").headers  # its scripts come from a CDN
    finally:
        server.should_exit = True
        thread.join(30)
        service.evaluations.close()
        service.store.close()
