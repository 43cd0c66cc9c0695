"""``kloop eval|run|batch ... --server URL``: the same command, judged by a ``kloop serve`` elsewhere.

The job is submitted, followed through its server-sent events, and printed as the local command
prints it (the report; each step's line and the run's summary); the exit code is the local one.
Ctrl-C cancels the job on the server.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any

import typer

from agent.cli.common import console, errors
from agent.errors import UserError


def server_decides(sandbox, pkb_root, **local_only: Any) -> None:
    """Options that choose where or how this machine would judge mean nothing to a server."""
    from pathlib import Path

    given = [name for name, value in (("--sandbox", sandbox.backend != "local"), ("--gpus", sandbox.gpus), ("--image", sandbox.image),
                                      ("--pkb-root", pkb_root)) if value]
    given += [f"--{name.replace('_', '-')}" for name, value in local_only.items()
              if value not in (None, True, Path("runs"))]
    if given:
        raise UserError(f"{', '.join(given)}: the server decides these; leave them out with --server")


@contextmanager
def following(client, job_id: str):
    """Ctrl-C while following a job cancels it on the server."""
    try:
        yield
    except KeyboardInterrupt:
        errors.print(f"interrupted: cancelling job {job_id} on the server")
        try:
            job = client.cancel(job_id)
            errors.print(f"job {job_id}: {job['status']}")
        except UserError as error:
            errors.print(f"could not cancel job {job_id}: {error}")
        raise typer.Exit(130) from None


def _ended_badly(job: dict[str, Any]) -> None:
    if job["status"] in ("failed", "cancelled", "interrupted") and not job.get("result"):
        raise UserError(f"job {job['id']} {job['status']}: {job.get('error') or 'no reason given'}")


def remote_eval(server: str, body: dict[str, Any], filename: str, as_json: bool) -> None:
    from sandbox.report import EvalReport
    from service.client import ServiceClient

    with ServiceClient(server) as client:
        job_id = client.submit("evals", body)
        with following(client, job_id):
            if as_json:
                job = client.follow(job_id)
            else:
                status = console.status(f"job {job_id} on {server}: queued", spinner="dots")
                with status:
                    job = client.follow(job_id, lambda type_, data: status.update(f"job {job_id} on {server}: {data['status']}")
                                        if type_ == "status" else None)
    _ended_badly(job)
    if job["status"] != "done":
        errors.print(f"job {job_id} {job['status']}: {job.get('error') or ''}")
    report = EvalReport.model_validate(job["result"])
    if as_json:
        print(report.model_dump_json(indent=2))
    else:
        from agent.render import print_report

        print_report(report, console)
    raise typer.Exit(0 if report.correct else 1)


def remote_run(server: str, body: dict[str, Any]) -> None:
    from agent.render import spend_line, step_line
    from service.client import ServiceClient

    steps = body["steps"] if body["mode"] == "loop" else 1
    with ServiceClient(server) as client:
        job_id = client.submit("runs", body)
        console.print(f"[bold]{body['problem']}[/] with [bold]{body['model']}[/], {body['mode']} mode, world {body['world']} on "
                      f"{body['device']}; job {job_id} on {server} ({server.rstrip('/')}/jobs/{job_id})")

        def show(type_: str, data: dict[str, Any]) -> None:
            if type_ == "step":
                console.print(step_line(data, steps), highlight=False)
            elif type_ == "status" and data.get("status") == "queued" and data.get("recovered"):
                console.print(f"the server restarted; job {job_id} is queued again", highlight=False)

        with following(client, job_id), console.status("working (model call, then evaluation)...", spinner="dots"):
            job = client.follow(job_id, show)
    _ended_badly(job)
    summary = job.get("result") or {}
    stats = summary.get("model_stats") or {}
    cost = stats.get("instance_cost") if stats.get("cost_known", True) else None
    console.print(f"\n[bold]{summary.get('exit_status', job['status'])}[/]: {summary.get('message', job.get('error') or '')}")
    console.print(spend_line(stats.get("api_calls", 0), stats.get("input_tokens", 0), stats.get("output_tokens", 0), cost,
                             summary.get("wall_s") or 0))
    if job["status"] != "done":
        console.print(f"job {job_id} {job['status']}: {job.get('error') or ''}", highlight=False)
    console.print(f"trajectory: {server.rstrip('/')}/v1/runs/{job_id}/trajectory")
    raise typer.Exit(0 if summary.get("best") else 1)


def remote_batch(server: str, config: dict[str, Any], config_text: str, out) -> None:
    """``kloop batch CONFIG --out DIR --server URL``: the batch runs on the server; its progress is
    printed as the local command prints it; at the end DIR holds its config.yaml, summary.json,
    results.jsonl, each episode's trajectory and best solution, and a report.html linking to them
    (``kloop report DIR`` reads them), and the leaderboard is printed. DIR/server.json names the
    job: the same command again follows it; a DIR holding another batch is refused (service/batch_copy.py)."""
    from pathlib import Path

    from agent.batch.episodes import Episode, EpisodeResult
    from agent.batch.leaderboard import print_summary
    from agent.batch.progress import BatchProgress
    from service import batch_copy
    from service.client import ServiceClient

    folder = Path(out)
    shown: list[BatchProgress] = []  # the bar of the batch's current start (a restarted server starts it again)
    with ServiceClient(server) as client:
        job_id = batch_copy.claim(folder, server, config)
        if job_id is None:
            job_id = client.submit("batches", {"config": config})
            batch_copy.mark(folder, server, job_id, config)
            console.print(f"batch job {job_id} on {server} ({server.rstrip('/')}/jobs/{job_id})", highlight=False)
        else:
            if client.job_if_given(job_id) is None:
                raise UserError(f"{folder} is the copy of job {job_id} of {server}, but the server does not give it to this "
                                f"token (no such job, or another token's); choose another --out")
            console.print(f"{folder} is the copy of batch job {job_id} on {server}: following it again "
                          f"({server.rstrip('/')}/jobs/{job_id})", highlight=False)

        def show(type_: str, data: dict[str, Any]) -> None:
            if type_ == "batch_started":
                for old in shown:
                    old.stop()
                shown[:] = [BatchProgress(console)]
                shown[0].start(total=data["episodes"], done=[EpisodeResult.model_validate(r) for r in data.get("done", [])],
                               executor=f"on the server: {data.get('executor', '')}")
            elif type_ == "status" and data.get("status") == "queued" and data.get("recovered"):
                console.print(f"the server restarted; job {job_id} is queued again (finished episodes are kept)", highlight=False)
            elif shown and type_ == "episode_started":
                shown[0].started(Episode.model_construct(**data))
            elif shown and type_ == "episode_retried":
                shown[0].retried(EpisodeResult.model_validate(data))
            elif shown and type_ == "episode":
                shown[0].finished(EpisodeResult.model_validate(data))

        try:
            with following(client, job_id):
                job = client.follow(job_id, show)
        finally:
            for bar in shown:
                bar.stop()
        _ended_badly(job)
        result = dict(job.get("result") or {})
        stats = result.pop("progress", None) or {}
        fetched = batch_copy.fetch(client, job_id, folder, config_text, result)
    console.print()
    print_summary(result, console)
    if stats.get("stopped_by_cost"):
        console.print(f"[yellow]stopped at the spend cap: {stats['stopped_by_cost']} episodes not run[/]")
    if job["status"] != "done":
        console.print(f"job {job_id} {job['status']}: {job.get('error') or ''} ({folder} keeps what it finished; to run the "
                      f"batch again, choose another --out)", highlight=False)
    console.print(f"results: {folder / 'results.jsonl'}  summary: {folder / 'summary.json'}"
                  + (f"  report: {folder / 'report.html'}" if fetched.report_written else "")
                  + f"  episodes' trajectories: {folder / 'runs'} ({fetched.trajectories_fetched} fetched now"
                  + (f", {fetched.trajectories_missing} the server has none of" if fetched.trajectories_missing else "") + ")",
                  highlight=False, soft_wrap=True)
    infra = fetched.infra_episodes
    if infra:
        console.print(f"[magenta]{infra} episodes ended as infrastructure failures[/] (kept out of the scores)")
    raise typer.Exit(3 if infra or job["status"] != "done" else 0)
