"""A batch folder, safe against ``kill -9`` at any instant.

```
DIR/config.yaml           the config the batch was last run with, as written (batch.json: as read; a
                          resume may add models, problems and samples, never change what an episode is)
DIR/episodes/<id>.json    one file per finished episode, written atomically: the record of truth
DIR/results.jsonl         one line per finished episode, appended and fsynced after its file
DIR/attempts.jsonl        tries lost to infrastructure failures that were run again
DIR/runs/<id>/tryN/       each try's run folder (trajectory, steps, best solution)
DIR/summary.json          the metrics (written at the end of every run of the batch, and by `kloop report`)
```

A kill between an episode's file and its line leaves a file without a line: opening the store
appends the line. A torn last line (killed mid-write) is dropped and its episode's line written
again. So every finished episode has exactly one line, and an unfinished one none (it runs again).
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

import structlog

from agent.batch.config import BatchConfig
from agent.batch.episodes import EpisodeResult
from agent.errors import UserError
from sandbox.atomic_file import atomic_write

log = structlog.get_logger(__name__)

RESULTS = "results.jsonl"
ATTEMPTS = "attempts.jsonl"


def append_line(path: Path, record: dict[str, Any]) -> None:
    """One JSON line, on disk before this returns."""
    with path.open("a") as handle:
        handle.write(json.dumps(record, default=str) + "\n")
        handle.flush()
        os.fsync(handle.fileno())


def read_lines(path: Path) -> list[dict[str, Any]]:
    """The complete JSON lines of ``path`` (a torn or unreadable line is skipped)."""
    if not path.exists():
        return []
    records = []
    for line in path.read_text(errors="replace").splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict):
            records.append(record)
    return records


def load_results(folder: Path) -> list[EpisodeResult]:
    """The finished episodes of a batch folder (from its episode files; ``results.jsonl`` when
    there are none, as in a folder copied without them)."""
    folder = Path(folder)
    files = sorted((folder / "episodes").glob("*.json"))
    if files:
        return [EpisodeResult.model_validate_json(path.read_text()) for path in files]
    if not (folder / RESULTS).exists():
        raise UserError(f"{folder} is not a batch folder (no {RESULTS}; `kloop batch CONFIG --out {folder}` makes one)")
    latest = {record["id"]: record for record in read_lines(folder / RESULTS) if "id" in record}
    return [EpisodeResult.model_validate(record) for record in latest.values()]


class ResultStore:
    def __init__(self, folder: Path):
        self.folder = Path(folder)
        self.results_path = self.folder / RESULTS
        self.attempts_path = self.folder / ATTEMPTS
        self.episodes_dir = self.folder / "episodes"
        self._lock = threading.Lock()
        self.finished: dict[str, EpisodeResult] = {}
        self._infra: dict[str, int] = {}

    def open(self, config: BatchConfig, source_text: str) -> ResultStore:
        """Make or reopen the folder for ``config``; a folder of a batch whose episodes differ is a UserError."""
        self.episodes_dir.mkdir(parents=True, exist_ok=True)
        resolved = self.folder / "batch.json"
        if resolved.exists():
            changed = config.changed_fields(json.loads(resolved.read_text()))
            if changed:
                raise UserError(f"{self.folder} holds a batch run with another {', '.join(changed)}; its results would not compare: "
                                f"use another --out, or the config in {self.folder / 'config.yaml'}")
        atomic_write(self.folder / "config.yaml", source_text)
        atomic_write(resolved, config.model_dump_json(indent=2))
        self._reconcile()
        return self

    def _reconcile(self) -> None:
        for path in sorted(self.episodes_dir.glob("*.json")):
            try:
                result = EpisodeResult.model_validate_json(path.read_text())
            except ValueError:  # cannot happen with atomic writes; a hand-edited file runs again
                log.warning("unreadable episode file, episode runs again", path=str(path))
                path.unlink()
                continue
            self.finished[result.id] = result
        lines = read_lines(self.results_path)
        seen: dict[str, dict[str, Any]] = {}
        for record in lines:
            if record.get("id") in self.finished:
                seen[record["id"]] = record
        raw = self.results_path.read_bytes() if self.results_path.exists() else b""
        if len(seen) != len(lines) or (raw and not raw.endswith(b"\n")):
            # a torn line, a duplicate or a line of an episode without its file: write the file anew
            atomic_write(self.results_path, "".join(json.dumps(r, default=str) + "\n" for r in seen.values()))
        missing = [result for rid, result in self.finished.items() if rid not in seen]
        for result in missing:
            append_line(self.results_path, result.model_dump(mode="json"))
        if missing:
            log.info("results lines restored", count=len(missing))
        for record in read_lines(self.attempts_path):
            if "id" in record:
                self._infra[record["id"]] = self._infra.get(record["id"], 0) + 1

    def record(self, result: EpisodeResult) -> None:
        """A finished episode: its file, then its line."""
        with self._lock:
            if result.id in self.finished:
                raise RuntimeError(f"episode {result.id} is already recorded")
            atomic_write(self.episodes_dir / f"{result.id}.json", result.model_dump_json(indent=2))
            append_line(self.results_path, result.model_dump(mode="json"))
            self.finished[result.id] = result

    def record_infra_attempt(self, result: EpisodeResult) -> None:
        """A try lost to infrastructure that will be run again."""
        with self._lock:
            append_line(self.attempts_path, result.model_dump(mode="json"))
            self._infra[result.id] = self._infra.get(result.id, 0) + 1

    def infra_attempts(self, episode_id: str) -> int:
        return self._infra.get(episode_id, 0)

    def next_try(self, episode_id: str) -> int:
        """The number of this episode's next try folder (tries killed midway keep theirs)."""
        runs = self.folder / "runs" / episode_id
        numbers = [int(p.name[3:]) for p in runs.glob("try*") if p.name[3:].isdigit()] if runs.exists() else []
        return max(numbers, default=0) + 1

    def forget(self, ids: set[str]) -> None:
        """``--redo-failed``: these episodes run again (their lines go first, then their files)."""
        if not ids:
            return
        with self._lock:
            kept = [r for r in read_lines(self.results_path) if r.get("id") not in ids]
            atomic_write(self.results_path, "".join(json.dumps(r, default=str) + "\n" for r in kept))
            attempts = [r for r in read_lines(self.attempts_path) if r.get("id") not in ids]
            atomic_write(self.attempts_path, "".join(json.dumps(r, default=str) + "\n" for r in attempts))
            for episode_id in ids:
                (self.episodes_dir / f"{episode_id}.json").unlink(missing_ok=True)
                self.finished.pop(episode_id, None)
                self._infra.pop(episode_id, None)
