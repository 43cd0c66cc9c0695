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
