"""The web page: server-rendered (Jinja2 templates in service/templates), a little JavaScript
(service/static/app.js) that refreshes the parts that change. ``/`` lists the jobs with live
status; ``/jobs/{id}`` shows an evaluation's report, a run's steps (the answer, the diff from the
previous step, the verdict, speedup, roofline, where the time went, the feedback that went back)
or a batch's leaderboard (agent/batch's summary), plots and its report.html. The token is kept in an HttpOnly, SameSite=Strict cookie.
The pages follow the API's ownership rule: a token sees its own jobs (an admin token, every job);
another token's job is "not found", as one that does not exist.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import parse_qs

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates

from service import auth, views
from service.server import Service

HERE = Path(__file__).parent
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
                               "frame-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'",
    "X-Content-Type-Options": "nosniff", "Referrer-Policy": "same-origin", "X-Frame-Options": "SAMEORIGIN",
}


def add_web(app: FastAPI, service: Service) -> None:
    templates = Jinja2Templates(directory=HERE / "templates")
    templates.env.globals.update(ago=views.ago, duration=views.duration)
    app.mount("/static", StaticFiles(directory=HERE / "static"), name="static")

    @app.middleware("http")
    async def security_headers(request: Request, call_next):
        response = await call_next(request)
        if not request.url.path.startswith("/v1/docs"):  # the docs page loads its scripts from a CDN
            for name, value in SECURITY_HEADERS.items():
                response.headers.setdefault(name, value)
        return response

    def viewer(request: Request):
        return auth.lookup(service.store, request.cookies.get(auth.COOKIE))

    def visible(request: Request, job_id: str):
        """The job when the page's token may see it, else None (absent and another token's alike)."""
        job, who = service.store.get(job_id), viewer(request)
        return job if job is not None and who is not None and who.may_see(job) else None

    def page(request: Request, name: str, status_code: int = 200, **context) -> HTMLResponse:
        html = templates.get_template(name).render({"request": request, "viewer": viewer(request), **context})
        return HTMLResponse(service.store.redact(html), status_code=status_code)  # run folders are shown: never a server key

    def login_first(request: Request) -> RedirectResponse:
        return RedirectResponse(f"/login?next={request.url.path}", status_code=303)

    @app.get("/favicon.ico", include_in_schema=False)
    def favicon() -> Response:
        return Response(status_code=204)

    @app.get("/login", response_class=HTMLResponse, include_in_schema=False)
    def login_page(request: Request, next: str = "/", error: str = "") -> HTMLResponse:
        return page(request, "login.html", next=next if next.startswith("/") and not next.startswith("//") else "/", error=error)

    @app.post("/login", include_in_schema=False)
    async def login(request: Request) -> Response:
        form = parse_qs((await request.body()).decode(errors="replace"))  # a urlencoded form; no multipart parser needed
        token, next = form.get("token", [""])[0].strip(), form.get("next", ["/"])[0]
        if auth.lookup(service.store, token) is None:
            return page(request, "login.html", status_code=401, next=next, error="That token is not valid here.")
        target = next if next.startswith("/") and not next.startswith("//") else "/"
        response = RedirectResponse(target, status_code=303)
        response.set_cookie(auth.COOKIE, token, httponly=True, samesite="strict", max_age=30 * 86400)
        return response

    @app.post("/logout", include_in_schema=False)
    def logout() -> Response:
        response = RedirectResponse("/login", status_code=303)
        response.delete_cookie(auth.COOKIE)
        return response

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    def jobs_page(request: Request, partial: str = "") -> Response:
        who = viewer(request)
        if who is None:
            return login_first(request)
        owner = None if who.admin else who.name
        jobs = service.store.list(owner=owner, limit=200)
        return page(request, "jobs_rows.html" if partial == "rows" else "jobs.html", jobs=jobs, counts=service.store.counts(owner))

    @app.get("/jobs/{job_id}", response_class=HTMLResponse, include_in_schema=False)
    def job_page(request: Request, job_id: str, partial: str = "") -> Response:
        if viewer(request) is None:
            return login_first(request)
        job = visible(request, job_id)
        if job is None:
            return page(request, "missing.html", status_code=404, what=f"job {job_id}")
        context = {"job": job, "partial": partial == "main"}
        if job.kind == "run":
            folder = service.folder(job)
            context.update(steps=views.run_steps(folder), config=views.run_config(folder))
        elif job.kind == "batch":
            folder = service.folder(job)
            context.update(views.batch_view(job.result, folder), episodes=views.batch_episodes(folder),
                           report_html=(folder / "report.html").exists())
        return page(request, f"{job.kind}.html", **context)

    @app.get("/jobs/{job_id}/runs/{episode}/{attempt}", response_class=HTMLResponse, include_in_schema=False)
    def episode_page(request: Request, job_id: str, episode: str, attempt: str) -> Response:
        """A batch episode's try, as a run view (``runs/<episode id>/try<N>`` of the batch folder)."""
        if viewer(request) is None:
            return login_first(request)
        job = visible(request, job_id)
        folder = views.episode_folder(service.folder(job), episode, attempt) if job is not None and job.kind == "batch" else None
        if folder is None:
            return page(request, "missing.html", status_code=404, what=f"episode {episode} {attempt}")
        return page(request, "run.html", job=job, episode=f"{episode} ({attempt})", steps=views.run_steps(folder),
                    config=views.run_config(folder), partial=False)

    @app.get("/jobs/{job_id}/report.html", include_in_schema=False)
    def batch_report(request: Request, job_id: str) -> Response:
        job = visible(request, job_id)
        path = service.folder(job) / "report.html" if job is not None and job.kind == "batch" else None
        if path is None or not path.exists():
            return Response(status_code=404)
        return HTMLResponse(service.store.redact(path.read_text()), headers={"Content-Security-Policy": "sandbox allow-scripts"})
