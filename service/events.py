"""Server-sent events of one job: what it stored as it ran, then what comes, until it ends.

Each event is ``id: <seq>`` / ``event: <type>`` / ``data: <json>``; types: ``status`` (queued,
running, done, ...), ``step`` (a run's step, or a batch episode's with its ``episode`` id: verdict,
speedup, tokens, cost), ``verdict`` (an evaluation's), a batch's ``batch_started``,
``episode_started``, ``episode`` (agent/batch's EpisodeResult) and ``episode_retried``, and a last
``end`` with the job's final status. A client
that reconnects with ``Last-Event-ID`` gets only what it missed.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator

import anyio

from service.store import Store

POLL_S = 0.25
KEEPALIVE_S = 10.0


def format_event(seq: int | None, type_: str, data: dict) -> str:
    head = f"id: {seq}\n" if seq is not None else ""
    return f"{head}event: {type_}\ndata: {json.dumps(data, default=str)}\n\n"


async def job_events(store: Store, job_id: str, after: int = 0, poll_s: float = POLL_S) -> AsyncIterator[str]:
    last_sent = time.monotonic()
    yield ": stream of job " + job_id + "\n\n"
    while True:
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
        await anyio.sleep(poll_s)
