"""What a running batch shows: a bar with episodes done, running, failed and lost to
infrastructure, the spend so far and an ETA, and one line per finished episode."""

from __future__ import annotations

import time

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from agent.batch.episodes import Episode, EpisodeResult

OUTCOME_STYLE = {"correct": "green", "failed": "red", "infra": "magenta", "skipped": "dim"}


def result_line(result: EpisodeResult) -> str:
    style = OUTCOME_STYLE.get(result.outcome, "")
    if result.outcome == "correct":
        what = f"correct at step {result.best_step}" + (f", {result.speedup:.2f}x" if result.speedup is not None else " (untimed)")
    elif result.outcome == "failed":
        what = f"no correct solution (last: {result.best_status})"
    else:
        what = f"{result.failure_class}: {result.message[:120]}"
    cost = f"${result.cost_usd:.3f}" if result.cost_usd is not None else "$?"
    return f"[{style}]{result.outcome:>7}[/] {result.id}  {what}  [dim]{result.steps_used} calls, {cost}, {result.wall_s:.0f} s[/]"


class BatchProgress:
    """Drives a rich progress bar on ``console`` (None: silent, for library use and tests)."""

    def __init__(self, console: Console | None):
        self.console = console
        self.running = 0
        self.counts = {"correct": 0, "failed": 0, "infra": 0, "skipped": 0}
        self.retries = 0
        self.spend = 0.0
        self.unknown_cost = 0
        self.done_here = 0
        self.started_at = time.monotonic()
        self._progress: Progress | None = None
        self._task = None

    def start(self, total: int, done: list[EpisodeResult], executor: str) -> None:
        for result in done:
            self._count(result)
        self.total, self.before = total, len(done)
        if self.console is None:
            return
        self.console.print(f"{total} episodes, {len(done)} already done; {executor}")
        self._progress = Progress(TextColumn("[bold]batch"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[stats]}"),
                                  TimeElapsedColumn(), TextColumn("ETA {task.fields[eta]}"), console=self.console, transient=False)
        self._task = self._progress.add_task("batch", total=total, completed=len(done), stats=self.stats(), eta=self.eta())
        self._progress.start()

    def _count(self, result: EpisodeResult) -> None:
        self.counts[result.outcome] = self.counts.get(result.outcome, 0) + 1
        if result.cost_usd is None and result.steps_used:
            self.unknown_cost += 1
        self.spend += result.cost_usd or 0.0

    def stats(self) -> str:
        c = self.counts
        unknown = f" (+{self.unknown_cost} unpriced)" if self.unknown_cost else ""
        retried = f", {self.retries} retried" if self.retries else ""
        return (f"[green]{c['correct']} correct[/] [red]{c['failed']} failed[/] [magenta]{c['infra']} infra{retried}[/] "
                f"{c['skipped']} skipped | {self.running} running | ${self.spend:.2f}{unknown}")

    def eta(self) -> str:
        if not self.done_here:
            return "-"
        left = self.total - self.before - self.done_here
        seconds = (time.monotonic() - self.started_at) / self.done_here * left
        return f"{seconds / 60:.0f} min" if seconds >= 120 else f"{seconds:.0f} s"

    def _refresh(self, advance: int = 0) -> None:
        if self._progress is not None:
            self._progress.update(self._task, advance=advance, stats=self.stats(), eta=self.eta())

    def started(self, episode: Episode) -> None:
        self.running += 1
        self._refresh()

    def retried(self, result: EpisodeResult) -> None:
        self.running -= 1
        self.retries += 1
        if self.console is not None:
            self.console.print(f"[magenta]  retry[/] {result.id}  {result.failure_class}: {result.message[:160]}", highlight=False)
        self._refresh()

    def finished(self, result: EpisodeResult) -> None:
        self.running -= 1
        self.done_here += 1
        self._count(result)
        if self.console is not None:
            self.console.print(result_line(result), highlight=False)
        self._refresh(advance=1)

    def stop(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None
