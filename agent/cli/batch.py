"""``kloop batch``: models x problems x samples, resumable; the leaderboard at the end."""

from __future__ import annotations

import enum
import os
from pathlib import Path
from typing import Annotated

import typer

from agent.cli.common import Server, console, errors
from agent.errors import UserError


class Executor(str, enum.Enum):
    local = "local"
    ray = "ray"


def command(
    config_path: Annotated[Path, typer.Argument(metavar="CONFIG.yaml", show_default=False, help="the batch config (models, problems, samples, ...)")],
    out: Annotated[Path, typer.Option("--out", "-o", help="the batch folder; the same folder again resumes", show_default=False)],
    workers: Annotated[int | None, typer.Option(min=1, help="episodes at once (default: the config's, else GPUs // GPUs per episode, 2 on cpu)")] = None,
    executor: Annotated[Executor, typer.Option(help="local (threads on this machine) or ray (tasks on a Ray cluster)")] = Executor.local,
    filter_: Annotated[str | None, typer.Option("--filter", help="run only episodes whose id (model__problem__sN) matches this regex")] = None,
    redo_failed: Annotated[bool, typer.Option(help="run again the episodes recorded as infrastructure failures")] = False,
    server: Server = None,
) -> None:
    """Run a batch comparison: every model on every problem, SAMPLES times; results in OUT/results.jsonl,
    metrics in OUT/summary.json, plots in OUT/report.html. Running it again resumes; kill -9 is safe.
    With --server the batch runs on that server (Ctrl-C cancels it there) and OUT gets its results, summary, each
    episode's trajectory and a report linking to them; OUT/server.json names the job, so the same command again follows
    it, and an OUT holding another batch (a local one, another job's) is refused."""
    from agent.batch.config import load_config
    from agent.batch.leaderboard import print_summary
    from agent.batch.progress import BatchProgress
    from agent.batch.report import write_reports
    from agent.batch.runner import run_batch
    import yaml

    from agent.cli.common import read_text

    config = load_config(config_path)
    text = read_text(config_path)
    if server:
        from agent.cli.remote import remote_batch

        local_only = [name for name, given in (("--executor", executor is not Executor.local), ("--filter", filter_),
                                               ("--redo-failed", redo_failed)) if given]
        if local_only:
            raise UserError(f"{', '.join(local_only)}: not offered with --server (the server runs the whole batch)")
        data = yaml.safe_load(text)
        remote_batch(server, {**data, "workers": workers} if workers else data, text, out)
    from service.batch_copy import read_marker

    copied = read_marker(out)
    if copied is not None:
        raise UserError(f"{out} is the copy of batch job {copied.job_id} of {copied.server_url}; follow it with "
                        f"--server {copied.server_url}, or choose another --out to run the batch here")
    try:
        outcome = run_batch(config, text, out, workers=workers, executor=executor.value, pattern=filter_, redo_failed=redo_failed,
                            progress=BatchProgress(console))
    except KeyboardInterrupt:
        errors.print(f"interrupted: finished episodes are saved in {out}; run the same command again to resume")
        os._exit(130)  # running episodes' threads are not waited for
    summary = write_reports(out)
    console.print()
    print_summary(summary, console)
    if outcome.stopped_by_cost:
        console.print(f"[yellow]stopped at the spend cap of ${config.max_cost_usd:.2f}: {outcome.stopped_by_cost} episodes not run[/]")
    console.print(f"results: {out / 'results.jsonl'}  summary: {out / 'summary.json'}  report: {out / 'report.html'}")
    infra = outcome.outcomes.get("infra", 0)
    if infra:
        console.print(f"[magenta]{infra} episodes ended as infrastructure failures[/] (kept out of the scores; "
                      f"--redo-failed runs them again)")
    raise typer.Exit(3 if infra else 0)
