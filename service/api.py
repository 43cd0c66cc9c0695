"""The HTTP API under /v1 (FastAPI; schema at /v1/openapi.json, docs at /v1/docs).

Every call needs ``Authorization: Bearer <token>`` (or the web page's cookie). A request body is
refused before it is read when it is larger than the token's limit (413; checked on
Content-Length, and counted as it streams when there is none) or when the token is not valid
(401). Malformed requests get 422 with one line per problem; a token with too many jobs queued,
429. A job is its token's: for another token every call about it answers 404, as for a job that
does not exist, and lists leave it out (a token made with ``--admin`` sees every job). Handlers are plain functions (they run in the thread pool: the store is SQLite).
"""

from typing import Annotated, Any

from fastapi import Depends, FastAPI, Header, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse, StreamingResponse

from service import auth
from service.events import job_events
from service.jobs import RequestRejected
from service.models import Accepted, BatchRequest, EvalRequest, JobView, ProblemView, RunRequest
from service.server import Service
from service.store import QueueFull, TokenRecord

API = "/v1"
UNAUTHORIZED = ("a valid API token is needed: send `Authorization: Bearer <token>` "
                "(the server's operator makes one with `kloop serve token create NAME`)")
BODY_METHODS = {"POST", "PUT", "PATCH"}
ANONYMOUS_BODY_BYTES = 4096  # the web page's login form


def problem(status: int, detail: str, **extra: Any) -> JSONResponse:
    return JSONResponse({"detail": detail, **extra}, status_code=status,
                        headers={"WWW-Authenticate": "Bearer"} if status == 401 else None)


class BodyLimit:
    """ASGI middleware: a body is read only from a valid token and only up to its limit."""

    def __init__(self, app, service: Service):
        self.app, self.service = app, service

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["method"] not in BODY_METHODS:
            return await self.app(scope, receive, send)
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        if scope["path"].startswith(API + "/"):
            secret = auth.bearer(headers.get("authorization")) or _cookie(headers.get("cookie"))
            token = auth.lookup(self.service.store, secret)
            if token is None:
                return await problem(401, UNAUTHORIZED)(scope, receive, send)
            limit = min(token.max_body_bytes, self.service.settings.max_body_bytes)
            whose = "this token's"
        else:
            limit, whose = ANONYMOUS_BODY_BYTES, "this page's"
        declared = headers.get("content-length")
        if declared is not None:
            if not declared.isdigit():
                return await problem(400, "Content-Length is not a number")(scope, receive, send)
            if int(declared) > limit:
                return await problem(413, f"the request body of {int(declared)} bytes is over {whose} limit of {limit} bytes",
                                     limit_bytes=limit)(scope, receive, send)
        body, more = bytearray(), True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            body += message.get("body", b"")
            more = message.get("more_body", False)
            if len(body) > limit:
                return await problem(413, f"the request body is over {whose} limit of {limit} bytes",
                                     limit_bytes=limit)(scope, receive, send)
        replayed = False

        async def replay():
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": bytes(body), "more_body": False}
            return await receive()

        return await self.app(scope, replay, send)


def _cookie(header: str | None) -> str | None:
    for part in (header or "").split(";"):
        name, _, value = part.strip().partition("=")
        if name == auth.COOKIE:
            return value
    return None


def current_token(request: Request, authorization: Annotated[str | None, Header(include_in_schema=False)] = None) -> TokenRecord:
    record = auth.lookup(request.app.state.service.store, auth.bearer(authorization) or request.cookies.get(auth.COOKIE))
    if record is None:
        raise HTTPException(401, UNAUTHORIZED, headers={"WWW-Authenticate": "Bearer"})
    return record


Token = Annotated[TokenRecord, Depends(current_token)]
IdempotencyKey = Annotated[str | None, Header(max_length=200, description="the same key again returns the job made the first time")]


def create_app(service: Service) -> FastAPI:
    app = FastAPI(title="kernel-loop", version="1", openapi_url=f"{API}/openapi.json", docs_url=f"{API}/docs", redoc_url=None,
                  description="Evaluate multi-GPU kernels, run agents that write them, compare models. "
                              "Every call needs `Authorization: Bearer <token>`.")
    app.state.service = service

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, error: RequestValidationError) -> JSONResponse:
        lines = [f"{'.'.join(str(part) for part in e['loc'])}: {e['msg']}" for e in error.errors()]
        return problem(422, "; ".join(lines), errors=[{"loc": list(e["loc"]), "msg": e["msg"]} for e in error.errors()])

    @app.exception_handler(RequestRejected)
    async def rejected(request: Request, error: RequestRejected) -> JSONResponse:
        return problem(422, str(error))

    @app.exception_handler(QueueFull)
    async def queue_full(request: Request, error: QueueFull) -> JSONResponse:
        return problem(429, str(error))

    def accept(kind: str, who: TokenRecord, body, key: str | None) -> Accepted:
        job, created = service.submit(kind, who.name, body, who.max_queued, key)
        return Accepted(id=job.id, status=job.status, created=created)

    @app.post(f"{API}/evals", response_model=Accepted, status_code=201, tags=["jobs"], summary="Judge one solution")
    def submit_eval(body: EvalRequest, who: Token, idempotency_key: IdempotencyKey = None) -> Accepted:
        return accept("eval", who, body, idempotency_key)

    @app.post(f"{API}/runs", response_model=Accepted, status_code=201, tags=["jobs"], summary="Start an agent run")
    def submit_run(body: RunRequest, who: Token, idempotency_key: IdempotencyKey = None) -> Accepted:
        return accept("run", who, body, idempotency_key)

    @app.post(f"{API}/batches", response_model=Accepted, status_code=201, tags=["jobs"], summary="Start a batch")
    def submit_batch(body: BatchRequest, who: Token, idempotency_key: IdempotencyKey = None) -> Accepted:
        return accept("batch", who, body, idempotency_key)

    def find(job_id: str, who: TokenRecord):
        """The job, when ``who`` may see it; 404 alike for a job that does not exist and another token's."""
        job = service.store.get(job_id)
        if job is None or not who.may_see(job):
            raise HTTPException(404, f"no job {job_id!r}")
        return job

    @app.get(f"{API}/jobs", response_model=list[JobView], tags=["jobs"],
             summary="This token's jobs, newest first (an admin token: every token's, unless mine=true)")
    def list_jobs(who: Token, status: str | None = None, mine: bool = False, limit: int = 100) -> list[dict]:
        return [job.public(with_request=False) for job in
                service.store.list(owner=None if who.admin and not mine else who.name, status=status, limit=max(1, min(limit, 1000)))]

    @app.get(f"{API}/jobs/{{job_id}}", response_model=JobView, tags=["jobs"], summary="A job's status and, when done, its result")
    def get_job(job_id: str, who: Token) -> dict:
        return find(job_id, who).public()

    @app.get(f"{API}/jobs/{{job_id}}/events", tags=["jobs"], summary="Server-sent events of a job, each step's verdict as it happens",
             response_class=StreamingResponse)
    def job_stream(job_id: str, who: Token, last_event_id: Annotated[str | None, Header()] = None) -> StreamingResponse:
        find(job_id, who)
        after = int(last_event_id) if last_event_id and last_event_id.isdigit() else 0
        return StreamingResponse(job_events(service.store, job_id, after), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})

    @app.delete(f"{API}/jobs/{{job_id}}", response_model=JobView, tags=["jobs"], summary="Cancel a job (its processes end)")
    def cancel_job(job_id: str, who: Token) -> dict:
        job = find(job_id, who)
        if not job.finished:
            job = service.cancel(job_id) or job
            job = wait_ended(service, job_id, job)
        return job.public()

    @app.get(f"{API}/problems", response_model=list[ProblemView], tags=["problems"], summary="The problem suite")
    def list_problems(who: Token) -> list[ProblemView]:
        from problems import all_problems

        return [ProblemView(name=p.name, category=p.spec.category, pattern=p.spec.pattern, world_sizes=list(p.spec.world_sizes),
                            dtype=p.spec.dtype, sizes=sorted(p.spec.shapes), description=p.spec.description) for p in all_problems()]

    @app.get(f"{API}/runs/{{job_id}}/trajectory", tags=["runs"], summary="A run's trajectory (mini-swe-agent's format)")
    def trajectory(job_id: str, who: Token) -> JSONResponse:
        import json

        job = find(job_id, who)
        if job.kind != "run":
            raise HTTPException(404, f"job {job_id} is a {job.kind}, not a run")
        from agent.trajectory import find_trajectory

        path = find_trajectory(service.folder(job))
        if not path.is_file():
            raise HTTPException(404, f"run {job_id} has no trajectory yet (status {job.status})")
        return JSONResponse(json.loads(service.store.redact(path.read_text())))  # files are answered as records are: never a key

    def batch_folder(job_id: str, who: TokenRecord):
        job = find(job_id, who)
        if job.kind != "batch":
            raise HTTPException(404, f"job {job_id} is a {job.kind}, not a batch")
        return service.folder(job)

    @app.get(f"{API}/batches/{{job_id}}/results", tags=["batches"], summary="A batch's finished episodes (its results.jsonl)")
    def batch_results(job_id: str, who: Token) -> list[dict]:
        from service.views import batch_episodes

        import json

        return json.loads(service.store.redact(json.dumps([r.model_dump(mode="json") for r in batch_episodes(batch_folder(job_id, who))])))

    def episode_folder(job_id: str, episode: str, attempt: str, who: TokenRecord):
        from service.views import episode_folder as folder_of

        folder = folder_of(batch_folder(job_id, who), episode, attempt)
        if folder is None:
            raise HTTPException(404, f"batch {job_id} has no episode {episode} {attempt}")
        return folder

    @app.get(f"{API}/batches/{{job_id}}/runs/{{episode}}/{{attempt}}/trajectory", tags=["batches"],
             summary="A batch episode's trajectory (its run_dir runs/EPISODE/ATTEMPT; mini-swe-agent's format)")
    def episode_trajectory(job_id: str, episode: str, attempt: str, who: Token) -> JSONResponse:
        import json

        from agent.trajectory import find_trajectory

        path = find_trajectory(episode_folder(job_id, episode, attempt, who))
        if not path.is_file():
            raise HTTPException(404, f"episode {episode} {attempt} of batch {job_id} has no trajectory")
        return JSONResponse(json.loads(service.store.redact(path.read_text())))

    @app.get(f"{API}/batches/{{job_id}}/runs/{{episode}}/{{attempt}}/best", tags=["batches"], response_class=PlainTextResponse,
             summary="A batch episode's best solution (best/solution.py of its run folder)")
    def episode_best(job_id: str, episode: str, attempt: str, who: Token) -> PlainTextResponse:
        path = episode_folder(job_id, episode, attempt, who) / "best" / "solution.py"
        if not path.is_file():
            raise HTTPException(404, f"episode {episode} {attempt} of batch {job_id} has no correct solution")
        return PlainTextResponse(service.store.redact(path.read_text()))

    @app.get(f"{API}/batches/{{job_id}}/report", tags=["batches"], summary="A batch's report.html (self-contained)",
             response_class=HTMLResponse)
    def batch_report(job_id: str, who: Token) -> HTMLResponse:
        path = batch_folder(job_id, who) / "report.html"
        if not path.is_file():
            raise HTTPException(404, f"batch {job_id} has no report yet (it is written when the batch ends)")
        return HTMLResponse(service.store.redact(path.read_text()), headers={"Content-Security-Policy": "sandbox allow-scripts"})

    @app.get(f"{API}/health", tags=["service"], summary="Liveness and queue counts (no token needed)")
    def health() -> dict:
        return {"ok": True, "jobs": service.store.counts()}

    from service.web import add_web

    add_web(app, service)
    app.add_middleware(BodyLimit, service=service)  # outermost: before anything reads a body
    return app


def wait_ended(service: Service, job_id: str, job, timeout_s: float = 15.0):
    """The job once its worker has ended it (a cancel reply says cancelled, not cancelling), or as it is after ``timeout_s``."""
    import time

    deadline = time.monotonic() + timeout_s
    while not job.finished and time.monotonic() < deadline:
        time.sleep(0.1)
        job = service.store.get(job_id) or job
    return job
