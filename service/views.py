"""What the web page shows, read from the store and the jobs' folders (no HTTP here).

A run view's steps come from its run folder (``steps/NNN/{response.md,solution.py,report.json}``
and the feedback messages of the trajectory); a batch view's from its ``results.jsonl`` and
summary (agent/batch's). Text from models and candidates is shown escaped (the templates autoescape).
"""

from __future__ import annotations

import difflib
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from markupsafe import Markup, escape

PALETTE = ("#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#4b5563", "#ca8a04")
MAX_SHOWN_CHARS = 60_000


@dataclass
class StepView:
    number: int
    response: str = ""
    solution: str = ""
    diff: list[tuple[str, str]] = field(default_factory=list)  # (css class, line)
    report: dict[str, Any] | None = None
    feedback: str = ""
    status: str = ""

    @property
    def speedup(self) -> float | None:
        return (self.report or {}).get("speedup")


def _read(path: Path) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return text if len(text) <= MAX_SHOWN_CHARS else text[:MAX_SHOWN_CHARS] + f"\n[... {len(text) - MAX_SHOWN_CHARS} more characters]"


def diff_lines(before: str, after: str) -> list[tuple[str, str]]:
    lines = []
    for line in difflib.unified_diff(before.splitlines(), after.splitlines(), "previous step", "this step", lineterm="", n=2):
        css = "add" if line.startswith("+") and not line.startswith("+++") else "del" if line.startswith("-") and not line.startswith("---") \
            else "hunk" if line.startswith("@@") else "ctx"
        lines.append((css, line))
    return lines


def run_steps(folder: Path) -> list[StepView]:
    """Each step of the run in ``folder``: the answer, its diff from the previous step's solution,
    the verdict and the feedback that went back."""
    from agent.trajectory import find_trajectory

    feedback: dict[int, str] = {}
    trajectory = find_trajectory(folder)
    if trajectory.is_file():
        try:
            messages = json.loads(trajectory.read_text()).get("messages", [])
        except ValueError:
            messages = []  # being replaced right now: the next refresh reads it
        for message in messages:
            step = (message.get("extra") or {}).get("step")
            if message.get("role") == "user" and step is not None:
                feedback[int(step)] = message.get("content", "")
    steps, previous = [], ""
    for path in sorted((folder / "steps").glob("[0-9][0-9][0-9]")):
        number = int(path.name)
        view = StepView(number=number, response=_read(path / "response.md"), solution=_read(path / "solution.py"),
                        feedback=feedback.get(number, ""))
        report = path / "report.json"
        if report.exists():
            try:
                view.report = json.loads(report.read_text())
                view.status = view.report.get("status", "")
            except ValueError:
                pass
        elif view.feedback:
            view.status = "no solution"
        else:
            view.status = "evaluating" if view.solution else "waiting"
        if view.solution:
            view.diff = diff_lines(previous, view.solution) if previous else []
            previous = view.solution
        steps.append(view)
    return steps


def run_config(folder: Path) -> dict[str, Any]:
    try:
        return json.loads((folder / "config.json").read_text())
    except (OSError, ValueError):
        return {}


def batch_view(result: Any, folder: Path) -> dict[str, Any]:
    """A batch's leaderboard and plots from its summary (agent/batch's summary.json, with the job's
    ``progress``): ``board`` rows are the summary's leaderboard order, each with the model's metrics."""
    summary = result if isinstance(result, dict) else {}
    models = summary.get("models") or {}
    board = [{**row, "m": models[row["model"]]} for row in summary.get("leaderboard") or [] if row.get("model") in models]
    values = summary.get("fast_p_values") or []
    return {"summary": summary, "progress": summary.get("progress") or {}, "board": board,
            "fast_p_chart": line_chart({r["model"]: [(float(p), r["m"]["fast_p"][p]["value"]) for p in values if p in r["m"]["fast_p"]]
                                        for r in board}, "p (speedup over the reference)", "fast_p"),
            "pass_chart": bar_chart({r["model"]: (r["m"]["pass_at_k"].get("1") or {}).get("value") for r in board}, "pass@1")}


def batch_episodes(folder: Path) -> list[Any]:
    """The batch's finished episodes (agent/batch's EpisodeResult), by model, problem and sample."""
    from agent.batch.store import load_results
    from agent.errors import UserError

    try:
        results = load_results(folder)
    except (UserError, OSError, ValueError):
        return []  # nothing finished yet
    return sorted(results, key=lambda r: (r.model, r.problem, r.sample))


def episode_folder(batch: Path, episode: str, attempt: str) -> Path | None:
    """A batch episode's try folder (``runs/<episode id>/<attempt>`` of the batch folder), None when
    the names are not plain folder names or it does not exist."""
    safe = all(name and name not in (".", "..") and not name.startswith(".") and "/" not in name and "\\" not in name
               for name in (episode, attempt))
    folder = batch / "runs" / episode / attempt if safe else None
    return folder if folder is not None and folder.is_dir() else None


def ago(timestamp: float | None) -> str:
    if not timestamp:
        return ""
    seconds = max(0, int(time.time() - timestamp))
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds // size} {unit} ago"
    return f"{seconds} s ago"


def duration(start: float | None, end: float | None) -> str:
    if not start:
        return ""
    seconds = (end or time.time()) - start
    return f"{seconds:.1f} s" if seconds < 120 else f"{seconds / 60:.1f} min"


def line_chart(series: dict[str, list[tuple[float, float | None]]], x_label: str, y_label: str, width: int = 520,
               height: int = 260) -> Markup:
    """An SVG line chart, y in [0, 1]: one polyline a series (escaped names, no script)."""
    left, right, top, bottom = 48, 150, 14, 36
    xs = sorted({x for points in series.values() for x, _ in points}) or [0.0, 1.0]
    x0, x1 = xs[0], xs[-1] if xs[-1] > xs[0] else xs[0] + 1
    plot_w, plot_h = width - left - right, height - top - bottom

    def sx(x: float) -> float:
        return left + (x - x0) / (x1 - x0) * plot_w

    def sy(y: float) -> float:
        return top + (1 - y) * plot_h

    parts = [f'<svg class="chart" viewBox="0 0 {width} {height}" width="{width}" height="{height}" role="img" '
             f'aria-label="{escape(y_label)} against {escape(x_label)}">']
    for tick in (0, 0.25, 0.5, 0.75, 1.0):
        parts.append(f'<line x1="{left}" x2="{left + plot_w}" y1="{sy(tick):.1f}" y2="{sy(tick):.1f}" stroke="#e5e7eb"/>'
                     f'<text x="{left - 6}" y="{sy(tick) + 4:.1f}" text-anchor="end" font-size="11">{tick:g}</text>')
    for x in xs:
        parts.append(f'<text x="{sx(x):.1f}" y="{top + plot_h + 16}" text-anchor="middle" font-size="11">{x:g}</text>')
    parts.append(f'<text x="{left + plot_w / 2:.1f}" y="{height - 4}" text-anchor="middle" font-size="12">{escape(x_label)}</text>')
    parts.append(f'<text x="12" y="{top + plot_h / 2:.1f}" text-anchor="middle" font-size="12" '
                 f'transform="rotate(-90 12 {top + plot_h / 2:.1f})">{escape(y_label)}</text>')
    for index, (name, points) in enumerate(series.items()):
        color = PALETTE[index % len(PALETTE)]
        shown = [(x, y) for x, y in points if y is not None]
        if shown:
            path = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in shown)
            parts.append(f'<polyline fill="none" stroke="{color}" stroke-width="2" points="{path}"/>')
            parts += [f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="3" fill="{color}"/>' for x, y in shown]
        legend_y = top + 14 + index * 16
        parts.append(f'<rect x="{width - right + 10}" y="{legend_y - 9}" width="10" height="10" fill="{color}"/>'
                     f'<text x="{width - right + 24}" y="{legend_y}" font-size="11">{escape(name[:22])}</text>')
    parts.append("</svg>")
    return Markup("".join(parts))


def bar_chart(values: dict[str, float | None], label: str, width: int = 520) -> Markup:
    """Horizontal SVG bars, values in [0, 1]."""
    row, left = 22, 170
    height = row * max(1, len(values)) + 24
    parts = [f'<svg class="chart" viewBox="0 0 {width} {height}" width="{width}" height="{height}" role="img" aria-label="{escape(label)}">']
    for index, (name, value) in enumerate(values.items()):
        y = index * row + 4
        bar = (width - left - 60) * (value or 0.0)
        parts.append(f'<text x="{left - 8}" y="{y + 14}" text-anchor="end" font-size="12">{escape(name[:26])}</text>'
                     f'<rect x="{left}" y="{y + 3}" width="{bar:.1f}" height="{row - 8}" fill="{PALETTE[index % len(PALETTE)]}"/>'
                     f'<text x="{left + bar + 6:.1f}" y="{y + 14}" font-size="12">{"-" if value is None else f"{value:.2f}"}</text>')
    parts.append(f'<text x="{left}" y="{height - 4}" font-size="12">{escape(label)}</text></svg>')
    return Markup("".join(parts))
