"""The service in one object: the store, the evaluation capacity, the scheduler, the settings.

``Service(settings).start()`` recovers what a dead server left (jobs it was running are queued
again or marked interrupted with their partial results; processes it left are ended), then starts
the workers. ``submit`` checks a request and commits the job before returning; ``cancel`` ends one.
"""

from __future__ import annotations

import os
import socket
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog

from service import batches, jobs
from service.auth import Limits
from service.evaluations import Evaluations, default_cpu_slots
from service.keys import redactor
from service.models import BatchRequest, EvalRequest, RunRequest
from service.scheduler import Scheduler
from service.store import Job, Store

log = structlog.get_logger(__name__)

SERVICE_ENV = "KLOOP_SERVICE_DB"  # every sandbox process of a server carries its database's path
DEFAULT_DB = Path("~/.local/share/kernel-loop/service/jobs.db")


def listen(host: str, port: int) -> socket.socket:
    """The server's listening socket, bound before anything starts (a port in use is an OSError
    here, not a service that started and cannot serve). Its protocol is named (``create_server``
    leaves it 0): asyncio turns Nagle's algorithm off only on TCP sockets that say they are TCP,
    and with it on, a response whose head and body are written apart (every response through an
    HTTP middleware) waited for the client's delayed ACK: 44 ms per request on a kept-alive
    connection."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    return socket.socket(fileno=socket.create_server((host, port), family=family).detach())


def default_db() -> Path:
    return Path(os.environ.get("KLOOP_SERVICE_DB_PATH") or DEFAULT_DB).expanduser()


@dataclass
class ServerSettings:
    db: Path = field(default_factory=default_db)
    gpus: tuple[str, ...] = ()
    cpu_slots: int = field(default_factory=default_cpu_slots)
    eval_workers: int = 0  # 0: as many as evaluations can run at once (CPU slots + GPUs)
    run_workers: int = 4
    model_calls: int = 8
    sandbox: str = "local"
    image: str | None = None
    rerun: tuple[str, ...] = ("eval", "batch")  # kinds run again after a crash; the others are marked interrupted
    max_body_bytes: int = 16 * 2**20  # no token may send more than this in one request
    default_limits: Limits = Limits()

    @property
    def data_dir(self) -> Path:
        return self.db.parent / "data"


class Service:
    def __init__(self, settings: ServerSettings):
        self.settings = settings
        self.store = Store(settings.db, redact=redactor())
        env = {SERVICE_ENV: str(settings.db.resolve())}
        (settings.data_dir / "sandboxes").mkdir(parents=True, exist_ok=True)
        self.evaluations = Evaluations(settings.gpus, settings.cpu_slots, settings.sandbox, settings.image,
                                       workdir=str(settings.data_dir / "sandboxes"), env=env)
        self.model_slots = threading.BoundedSemaphore(settings.model_calls)
        eval_workers = settings.eval_workers or settings.cpu_slots + len(settings.gpus)
        self.scheduler = Scheduler(self.store, {
            "eval": lambda job, control: jobs.run_eval(job, control, self.evaluations),
            "run": lambda job, control: jobs.run_agent(job, control, self.evaluations, self.model_slots, self.folder(job)),
            "batch": lambda job, control: batches.run_batch_job(job, control, self.evaluations, self.model_slots, self.folder(job)),
        }, {("eval",): eval_workers, ("run", "batch"): settings.run_workers}, partial=self.partial)

    def folder(self, job: Job) -> Path:
        """A run's run folder, a batch's output folder."""
        return self.settings.data_dir / "jobs" / job.id

    def partial(self, job: Job) -> Any:
        if job.kind == "run":
            return jobs.run_result(self.folder(job))
        if job.kind == "batch":
            current = self.store.get(job.id)
            return batches.partial_result(self.folder(job), current.result if current else None)
        return None

    def start(self) -> dict[str, list[str]]:
        ended = end_leftovers(self.settings.db)
        recovered = self.store.recover(self.settings.rerun)
        for job_id in recovered["interrupted"] + recovered["cancelled"]:
            job = self.store.get(job_id)
            if job is not None and job.result is None:
                partial = self.partial(job)
                if partial is not None:
                    self.store.set_result(job_id, partial)
        if ended or any(recovered.values()):
            log.warning("recovered after an unclean stop", processes_ended=ended, **{k: len(v) for k, v in recovered.items()})
        self.scheduler.start()
        return recovered

    def stop(self) -> None:
        self.scheduler.stop()
        self.evaluations.close()
        self.store.close()

    def check(self, kind: str, request: EvalRequest | RunRequest | BatchRequest) -> str:
        """The job's title; RequestRejected (-> 422) when it cannot run here."""
        if kind == "eval":
            return jobs.check_eval(request, self.evaluations)
        if kind == "run":
            return jobs.check_run(request, self.evaluations)
        return batches.check_batch(request.config, self.evaluations).title

    def submit(self, kind: str, owner: str, request: EvalRequest | RunRequest | BatchRequest, max_queued: int,
               idempotency_key: str | None = None) -> tuple[Job, bool]:
        title = self.check(kind, request)
        job, created = self.store.submit(kind, owner, request.model_dump(mode="json"), title, idempotency_key, max_queued)
        if created:
            self.store.add_event(job.id, "status", {"status": "queued"})
            self.scheduler.wake()
        return job, created

    def cancel(self, job_id: str) -> Job | None:
        return self.scheduler.cancel(job_id)


def end_leftovers(db: Path) -> int:
    """Kill processes a previous server on this database left (its sandboxes' harnesses and ranks)."""
    import psutil

    mine, ended = str(db.resolve()), 0
    for proc in psutil.process_iter():
        try:
            if proc.pid != os.getpid() and proc.environ().get(SERVICE_ENV) == mine:
                proc.kill()
                ended += 1
        except (psutil.Error, OSError):
            continue
    return ended
