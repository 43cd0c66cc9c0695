"""Reading batch folders back: their results (several folders side by side, a model named
the same in two of them told apart by its folder), the summary, and the HTML report."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from agent.batch.episodes import EpisodeResult
from agent.batch.metrics import BOOTSTRAP, summarize
from agent.batch.store import load_results
from sandbox.atomic_file import atomic_write


def folder_samples(folder: Path) -> int | None:
    import yaml

    try:
        return int((yaml.safe_load((folder / "config.yaml").read_text()) or {}).get("samples", 1))
    except (OSError, ValueError, TypeError, AttributeError):
        return None


def load_batches(folders: list[Path]) -> list[tuple[Path, EpisodeResult]]:
    """Every finished episode of ``folders``, each with its folder; where a label appears in more
    than one folder, it becomes ``label [folder name]``."""
    loaded = [(Path(folder), load_results(Path(folder))) for folder in folders]
    seen = Counter(label for _, results in loaded for label in {r.model for r in results})
    combined = []
    for folder, results in loaded:
        for result in results:
            if seen[result.model] > 1:
                result = result.model_copy(update={"model": f"{result.model} [{folder.name or folder.resolve().name}]"})
            combined.append((folder, result))
    return combined


def summary_of(folders: list[Path], resamples: int = BOOTSTRAP, seed: int = 0) -> tuple[dict[str, Any], list[tuple[Path, EpisodeResult]]]:
    results = load_batches(folders)
    samples = max((s for s in (folder_samples(Path(f)) for f in folders) if s), default=None)
    return summarize([r for _, r in results], samples=samples, resamples=resamples, seed=seed), results


def write_summary(folder: Path, resamples: int = BOOTSTRAP) -> dict[str, Any]:
    """``DIR/summary.json`` from the folder's results."""
    summary, _ = summary_of([folder], resamples)
    atomic_write(Path(folder) / "summary.json", json.dumps(summary, indent=2))
    return summary


def write_html(folders: list[Path], html_path: Path, resamples: int = BOOTSTRAP) -> dict[str, Any]:
    from agent.batch.report_html import render_report

    summary, results = summary_of(folders, resamples)
    atomic_write(Path(html_path), render_report(summary, results, Path(html_path), [Path(f) for f in folders]))
    return summary


def write_reports(folder: Path) -> dict[str, Any]:
    """What a run of a batch leaves at its end (``kloop batch``, the service's batch jobs):
    ``DIR/summary.json`` and ``DIR/report.html``; returns the summary."""
    summary = write_summary(folder)
    write_html([folder], Path(folder) / "report.html")
    return summary
