"""Worker threads that take queued jobs from the store and run them.

Evaluation jobs and agent jobs (runs, batches) have their own workers, so long runs waiting on a
model never hold up evaluations. A worker claims the oldest queued job whose token is under its
running limit (the claim is one SQLite transaction), runs it, and stores the result. What a job
may use at once is capped below it: evaluations by ``Evaluations`` (CPU slots, the GPU pool),
model calls by a semaphore shared by every job. Cancelling a running job ends its processes at
once (``JobControl``); its partial result is kept.
"""

from __future__ import annotations

import threading
import traceback
from collections.abc import Callable
from typing import Any

import structlog

from service.control import JobCancelled, JobControl, JobFailed
from service.store import Job, Store

log = structlog.get_logger(__name__)

Runner = Callable[[Job, JobControl], Any]
Partial = Callable[[Job], Any]
SHUTDOWN = "the server is shutting down"


class Scheduler:
    def __init__(self, store: Store, runners: dict[str, Runner], workers: dict[tuple[str, ...], int],
                 partial: Partial | None = None, poll_s: float = 1.0):
        """``workers`` maps kinds to the number of threads taking them, e.g. {("eval",): 2, ("run", "batch"): 4};
        ``partial(job)`` is what a job left behind when it was cancelled or failed (a run's steps so far)."""
        self.store, self.runners, self.workers, self.poll_s = store, runners, workers, poll_s
        self.partial = partial or (lambda job: None)
        self.active: dict[str, JobControl] = {}
        self._lock = threading.Lock()
        self._wake = threading.Condition()
        self._wakes = 0  # how many times wake() was called: a wake between a worker's empty claim and its wait still counts
        self._stopping = threading.Event()
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        for kinds, count in self.workers.items():
            for number in range(count):
                thread = threading.Thread(target=self._work, args=(kinds,), name=f"worker-{'-'.join(kinds)}-{number}", daemon=True)
                thread.start()
                self._threads.append(thread)

    def wake(self) -> None:
        with self._wake:
            self._wakes += 1
            self._wake.notify_all()

    def _work(self, kinds: tuple[str, ...]) -> None:
        while not self._stopping.is_set():
            with self._wake:
                wakes = self._wakes
            try:
                job = self.store.claim_next(kinds)
            except Exception as error:  # noqa: BLE001 - a locked or busy database: try again shortly
                log.warning("could not claim a job", error=str(error))
                job = None
            if job is None:
                with self._wake:
                    if self._wakes == wakes:  # else a job came while this one claimed: claim again at once
                        self._wake.wait(self.poll_s)
                continue
            self._run(job)
            self.wake()  # a job ended: a token under its limit again may have queued work

    def _run(self, job: Job) -> None:
        control = JobControl(job, self.store)
        with self._lock:
            self.active[job.id] = control
        current = self.store.get(job.id)
        if current is not None and current.cancel_requested:  # asked for between the claim and now
            control.cancel()
        control.emit("status", {"status": "running", "attempt": job.attempts})
        log.info("job started", job=job.id, kind=job.kind)
        status, result, error = "done", None, None
        try:
            result = self.runners[job.kind](job, control)
        except JobCancelled as cancelled:
            if control.reason == SHUTDOWN:
                log.info("job left for the next start", job=job.id)
                return  # stays `running`: the next start re-runs it or marks it interrupted (Store.recover)
            status, error, result = "cancelled", str(cancelled), self.partial(job)
        except JobFailed as failed:
            status, error, result = "failed", str(failed), self.partial(job)
        except Exception as crash:  # noqa: BLE001 - a job's bug fails that job, never the server
            log.error("job crashed", job=job.id, error=f"{type(crash).__name__}: {crash}", traceback=traceback.format_exc())
            status, error, result = "failed", f"internal error: {type(crash).__name__}: {crash}", self.partial(job)
        finally:
            with self._lock:
                self.active.pop(job.id, None)
        if control.cancelled.is_set() and status == "done" and control.reason != SHUTDOWN:
            status, error = "cancelled", control.reason  # ended by the cancel, as a crash report or an interrupted run
        self.store.finish(job.id, status, result, error)
        control.emit("status", {"status": status, "error": error})
        log.info("job ended", job=job.id, status=status)

    def cancel(self, job_id: str) -> Job | None:
        """Cancel ``job_id``: a queued job at once, a running one by ending its processes."""
        job, was_queued = self.store.request_cancel(job_id)
        if was_queued:
            self.store.add_event(job_id, "status", {"status": "cancelled", "error": "cancelled before it started"})
        with self._lock:
            control = self.active.get(job_id)
        if control is not None:
            control.cancel()
        return self.store.get(job_id)

    def stop(self, timeout_s: float = 30.0) -> None:
        """End the workers; running jobs are stopped and left for the next start to recover."""
        self._stopping.set()
        with self._lock:
            controls = list(self.active.values())
        for control in controls:
            control.cancel(SHUTDOWN)
        self.wake()
        for thread in self._threads:
            thread.join(timeout_s)
