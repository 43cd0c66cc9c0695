"""``kloop serve``: the HTTP API, the job store and the web page; ``kloop serve token ...``: API tokens."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from agent.cli.common import console, errors
from agent.errors import UserError

app = typer.Typer(add_completion=False, invoke_without_command=True,
                  help="Run the service (an HTTP API under /v1, a durable job store, a web page); manage its tokens.")
token_app = typer.Typer(no_args_is_help=True, add_completion=False, help="API tokens (stored hashed; shown once).")
app.add_typer(token_app, name="token")

Db = Annotated[Path | None, typer.Option("--db", help="the job store, an SQLite file (default: $KLOOP_SERVICE_DB_PATH or "
                                                      "~/.local/share/kernel-loop/service/jobs.db); run folders go beside it")]


def _db(db: Path | None) -> Path:
    from service.server import default_db

    return (db or default_db()).expanduser()


def _require_service_extra() -> None:
    try:
        import fastapi  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError:
        raise UserError("the service needs its extra: pip install 'kernel-loop[service]'") from None


@app.callback()
def serve(
    ctx: typer.Context,
    host: Annotated[str, typer.Option(help="address to listen on")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535, help="port to listen on")] = 8377,
    db: Db = None,
    gpus: Annotated[str | None, typer.Option(help="GPUs evaluations may use, e.g. 0,1,2,3 (default: every GPU NVML sees; none: '')")] = None,
    cpu_slots: Annotated[int | None, typer.Option(min=1, help="CPU evaluations at once (default: half the cores)")] = None,
    run_workers: Annotated[int, typer.Option(min=1, help="agent runs and batches at once (more wait in the queue)")] = 4,
    model_calls: Annotated[int, typer.Option(min=1, help="model calls in flight at once, over every job")] = 8,
    sandbox: Annotated[str, typer.Option(help="where candidates run: local (warm harnesses) or docker")] = "local",
    image: Annotated[str | None, typer.Option(help="sandbox image for --sandbox docker")] = None,
    keys_file: Annotated[Path | None, typer.Option(help="NAME=value lines (OPENAI_API_KEY=...) added to the server's environment; "
                                                        "mode 600")] = None,
    rerun_runs: Annotated[bool, typer.Option(help="after a crash, run agent runs that were running again (default: mark them "
                                                  "interrupted, keeping their steps)")] = False,
) -> None:
    """Serve the API at http://HOST:PORT/v1 (schema: /v1/openapi.json) and the web page at /."""
    if ctx.invoked_subcommand is not None:
        return
    _require_service_extra()
    import uvicorn

    from sandbox.gpu_pool import GpuPoolError, parse_gpu_ids
    from service.api import create_app
    from service.evaluations import default_cpu_slots, visible_gpus
    from service.keys import KeysFileError, load_keys_file
    from service.server import ServerSettings, Service, listen

    if sandbox not in ("local", "docker"):
        raise UserError(f"--sandbox {sandbox}: choose local or docker")
    if keys_file is not None:
        try:
            names = sorted(load_keys_file(keys_file.expanduser()))
        except KeysFileError as error:
            raise UserError(str(error)) from None
        console.print(f"keys from {keys_file}: {', '.join(names) or 'none'}", highlight=False)
    try:
        gpu_ids = visible_gpus() if gpus is None else parse_gpu_ids(gpus)
    except GpuPoolError as error:
        raise UserError(str(error)) from None
    try:
        listening = listen(host, port)
    except OSError as error:
        raise UserError(f"cannot listen on {host}:{port}: {error.strerror or error}") from None
    with listening:
        settings = ServerSettings(db=_db(db), gpus=gpu_ids, cpu_slots=cpu_slots or default_cpu_slots(), run_workers=run_workers,
                                  model_calls=model_calls, sandbox=sandbox, image=image,
                                  rerun=("eval", "batch", "run") if rerun_runs else ("eval", "batch"))
        service = Service(settings)
        recovered = service.start()
        if any(recovered.values()):
            console.print("recovered: " + ", ".join(f"{len(ids)} {what}" for what, ids in recovered.items() if ids), highlight=False)
        if not service.store.tokens():
            errors.print(f"[yellow]note:[/] no API token yet: kloop serve token create NAME --db {settings.db}", highlight=False)
        console.print(f"kloop serve: http://{host}:{port}/ (API /v1, schema /v1/openapi.json), store {settings.db}, "
                      f"GPUs {','.join(gpu_ids) or 'none'}, {settings.cpu_slots} CPU evaluation slot(s), {sandbox} sandbox", highlight=False,
                      soft_wrap=True)
        try:
            config = uvicorn.Config(create_app(service), log_level="warning", timeout_graceful_shutdown=5,
                                    timeout_keep_alive=75)  # longer than clients keep idle connections: no close races on a reused one
            uvicorn.Server(config).run(sockets=[listening])
        finally:
            service.stop()


@token_app.command("create")
def token_create(
    name: Annotated[str, typer.Argument(help="who the token is for (shown on the jobs it submits)")],
    db: Db = None,
    max_running: Annotated[int, typer.Option(min=1, help="jobs of this token running at once (more wait in the queue)")] = 4,
    max_queued: Annotated[int, typer.Option(min=1, help="jobs of this token queued at once (more are refused with 429)")] = 1000,
    max_body_bytes: Annotated[int, typer.Option(min=1, help="largest request body (413 beyond, before it is read)")] = 2 * 2**20,
    admin: Annotated[bool, typer.Option("--admin", help="the operator's token: it sees (and may cancel) every token's jobs; "
                                                         "any other token sees only the jobs it submitted")] = False,
) -> None:
    """Make a token and print it (only its SHA-256 is stored: keep it now). A token sees only its own
    jobs (another token's answer 404, as if absent); one made with --admin sees every job."""
    from service.auth import Limits, TokenError, create_token
    from service.store import Store

    store = Store(_db(db))
    try:
        secret = create_token(store, name, Limits(max_running=max_running, max_queued=max_queued, max_body_bytes=max_body_bytes),
                              admin=admin)
    except TokenError as error:
        raise UserError(str(error)) from None
    finally:
        store.close()
    print(secret)


@token_app.command("list")
def token_list(db: Db = None) -> None:
    """The tokens and their limits (never the secrets)."""
    from service.store import Store

    store = Store(_db(db))
    for token in store.tokens():
        console.print(f"{token.name:<24} {'revoked' if token.revoked else 'active':<8} {'admin' if token.admin else 'own jobs':<9} "
                      f"running<={token.max_running} queued<={token.max_queued} body<={token.max_body_bytes} B", highlight=False)
    store.close()


@token_app.command("revoke")
def token_revoke(name: str, db: Db = None) -> None:
    """Revoke a token: every call with it gets 401 from now on."""
    from service.store import Store

    store = Store(_db(db))
    revoked = store.revoke_token(name)
    store.close()
    if not revoked:
        raise UserError(f"no active token named {name!r}")
    console.print(f"revoked {name}")
