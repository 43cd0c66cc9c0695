"""Server-sent events of one job: what it stored as it ran, then what comes, until it ends.

Each event is ``id: <seq>`` / ``event: <type>`` / ``data: <json>``; types: ``status`` (queued,
running, done, ...), ``step`` (a run's step, or a batch episode's with its ``episode`` id: verdict,
speedup, tokens, cost), ``verdict`` (an evaluation's), a batch's ``batch_started``,
``episode_started``, ``episode`` (agent/batch's EpisodeResult) and ``episode_retried``, and a last
``end`` with the job's final status. A client
that reconnects with ``Last-Event-ID`` gets only what it missed. A stream wakes as soon as the store
writes an event of its job (``Store.listen``); it also looks every ``POLL_S``, for writes made by
another process.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator

import anyio

from service.store import Store

POLL_S = 1.0
KEEPALIVE_S = 10.0


def format_event(seq: int | None, type_: str, data: dict) -> str:
    head = f"id: {seq}\n" if seq is not None else ""
    return f"{head}event: {type_}\ndata: {json.dumps(data, default=str)}\n\n"


async def job_events(store: Store, job_id: str, after: int = 0, poll_s: float = POLL_S) -> AsyncIterator[str]:
    loop, written = asyncio.get_running_loop(), asyncio.Event()

    def wake(changed_job: str) -> None:
        if changed_job == job_id:
            try:
                loop.call_soon_threadsafe(written.set)
            except RuntimeError:  # the loop has closed: nobody is listening any more
                pass

    stop_listening = store.listen(wake)
    try:
        last_sent = time.monotonic()
        yield ": stream of job " + job_id + "\n\n"
        while True:
            written.clear()  # a write from here on wakes the wait below
            job = await anyio.to_thread.run_sync(store.get, job_id)
            events = await anyio.to_thread.run_sync(store.events, job_id, after)
            for event in events:
                after = event.seq
                yield format_event(event.seq, event.type, {**event.data, "at": event.at})
                last_sent = time.monotonic()
            if job is None or job.finished:
                # the status event that ends a job is written just after the job's row: read once more
                for event in await anyio.to_thread.run_sync(store.events, job_id, after):
                    after = event.seq
                    yield format_event(event.seq, event.type, {**event.data, "at": event.at})
                yield format_event(None, "end", {"status": job.status if job else "unknown", "error": job.error if job else None})
                return
            if time.monotonic() - last_sent > KEEPALIVE_S:
                yield ": keepalive\n\n"
                last_sent = time.monotonic()
            with anyio.move_on_after(poll_s):
                await written.wait()
    finally:
        stop_listening()
