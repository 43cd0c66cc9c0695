"""The local copy of a server's batch: what ``kloop batch CONFIG --out DIR --server URL`` leaves in DIR.

DIR gets what ``kloop batch`` leaves (config.yaml, summary.json, results.jsonl, report.html) and
each episode's trajectory and best solution at the place they have in the server's batch folder
(``runs/<episode>/<try>/``), so the report, written here from these files, links to local files.

``DIR/server.json`` names the server and the job (and the config's digest). The same command
again follows that job to its end (no second batch is submitted); a folder holding a local batch,
another job's copy or another config's is refused before anything is submitted or written.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import quote

import structlog
from pydantic import BaseModel, ValidationError

from agent.errors import UserError
from sandbox.atomic_file import atomic_write

log = structlog.get_logger(__name__)

MARKER = "server.json"
# what a batch folder holds (agent/batch/store.py), local or copied: any of them and DIR is a batch's
BATCH_ENTRIES = ("config.yaml", "batch.json", "results.jsonl", "attempts.jsonl", "summary.json", "report.html", "episodes", "runs")


class ServerBatchMarker(BaseModel):
    """``DIR/server.json``: DIR is the copy of this job of this server."""

    server_url: str
    job_id: str
    config_sha256: str


class FetchedBatch(BaseModel):
    """What a fetch wrote into DIR."""

    episodes: int
    infra_episodes: int  # ended as infrastructure failures (kept out of the scores)
    trajectories_fetched: int
    best_solutions_fetched: int
    trajectories_missing: int  # episodes the server has no trajectory for (e.g. lost to infrastructure before a call)
    report_written: bool


def server_key(url: str) -> str:
    return url.strip().rstrip("/")


def config_digest(config: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode()).hexdigest()


def read_marker(folder: Path) -> ServerBatchMarker | None:
    path = Path(folder) / MARKER
    if not path.is_file():
        return None
    try:
        return ServerBatchMarker.model_validate_json(path.read_text())
    except (OSError, ValidationError) as error:
        raise UserError(f"{path} is not a server batch's marker ({error.__class__.__name__}); choose another --out") from None


def claim(folder: Path, server_url: str, config: dict[str, Any]) -> str | None:
    """The job whose copy ``folder`` is, to be followed again; None when ``folder`` holds no batch
    (a new job may be submitted). UserError, saying why and what to do, when it holds another batch."""
    folder = Path(folder)
    marker = read_marker(folder)
    if marker is None:
        present = sorted(name for name in BATCH_ENTRIES if (folder / name).exists())
        if present:
            raise UserError(f"{folder} holds a local batch ({', '.join(present)}); fetching a server batch into it would "
                            f"overwrite it. Choose another --out, or resume it here without --server (`kloop batch CONFIG --out {folder}`)")
        return None
    if marker.server_url != server_key(server_url):
        raise UserError(f"{folder} holds the copy of job {marker.job_id} of another server ({marker.server_url}); "
                        f"choose another --out, or run the same command with --server {marker.server_url} to follow that job")
    if marker.config_sha256 != config_digest(config):
        raise UserError(f"{folder} holds the copy of job {marker.job_id} of {marker.server_url}, a batch of another config; "
                        f"choose another --out for this config")
    return marker.job_id


def mark(folder: Path, server_url: str, job_id: str, config: dict[str, Any]) -> None:
    """Record in ``folder`` that it is the copy of ``job_id`` (written before the job is followed, so an
    interrupted follow is taken up again by the same command)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    marker = ServerBatchMarker(server_url=server_key(server_url), job_id=job_id, config_sha256=config_digest(config))
    atomic_write(folder / MARKER, marker.model_dump_json(indent=2))


def run_parts(run_dir: Any) -> tuple[str, str] | None:
    """(episode, try) of a result's ``run_dir`` (``runs/EPISODE/TRY``) when it is one; None for
    anything else (a server's answer never picks where this machine writes)."""
    if not isinstance(run_dir, str) or "\\" in run_dir or "\0" in run_dir:
        return None
    parts = PurePosixPath(run_dir).parts
    if len(parts) != 3 or parts[0] != "runs" or any(not p or p.startswith(".") for p in parts[1:]):
        return None
    return parts[1], parts[2]


def fetch(client, job_id: str, folder: Path, config_text: str, summary: dict[str, Any]) -> FetchedBatch:
    """Write the batch ``job_id`` (ended) into ``folder``: its config, summary and results, each
    episode's trajectory and best solution (those already here are kept: they do not change once
    an episode has finished), and report.html made here from them."""
    from agent.batch.report import write_html

    folder = Path(folder)
    results = client.batch_results(job_id)
    trajectories = best = missing = 0
    for record in results:
        parts = run_parts(record.get("run_dir"))
        if parts is None:
            continue
        run = folder / "runs" / parts[0] / parts[1]
        url_path = "runs/" + "/".join(quote(p, safe="") for p in parts)
        if not (run / "trajectory.traj.json").is_file():
            text = client.episode_trajectory(job_id, url_path)
            if text is None:
                missing += 1
            else:
                run.mkdir(parents=True, exist_ok=True)
                atomic_write(run / "trajectory.traj.json", text)
                trajectories += 1
        if record.get("correct") and not (run / "best" / "solution.py").is_file():
            text = client.episode_best(job_id, url_path)
            if text is not None:
                (run / "best").mkdir(parents=True, exist_ok=True)
                atomic_write(run / "best" / "solution.py", text)
                best += 1
    atomic_write(folder / "config.yaml", config_text)
    atomic_write(folder / "summary.json", json.dumps(summary, indent=2))
    atomic_write(folder / "results.jsonl", "".join(json.dumps(r) + "\n" for r in results))
    if results:
        write_html([folder], folder / "report.html")
    log.info("batch_fetched", job=job_id, folder=str(folder), episodes=len(results), trajectories=trajectories, best=best)
    return FetchedBatch(episodes=len(results), infra_episodes=sum(1 for r in results if r.get("outcome") == "infra"),
                        trajectories_fetched=trajectories, best_solutions_fetched=best,
                        trajectories_missing=missing, report_written=bool(results))
