"""``kloop rejudge``: a batch's saved solutions judged again by the current harness."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from agent.cli.common import console


def command(
    folder: Annotated[Path, typer.Argument(metavar="DIR", show_default=False, help="a batch folder (kloop batch --out)")],
    workers: Annotated[int, typer.Option(min=1, help="episodes judged at once")] = 1,
    best_only: Annotated[bool, typer.Option(help="judge only each episode's best (or last) solution, not every step's")] = False,
) -> None:
    """Judge every saved solution of DIR again with the current harness and show what changed;
    the re-scored batch goes to DIR/rejudge (compare: kloop report DIR DIR/rejudge)."""
    from rich.table import Table

    from agent.batch.leaderboard import print_summary
    from agent.batch.rejudge import rejudge
    from agent.batch.report import summary_of

    with console.status(f"judging the saved solutions of {folder} again...", spinner="dots"):
        outcome = rejudge(folder, workers=workers, best_only=best_only)
    console.print(f"{outcome.evaluated} solutions judged again")
    if outcome.changes:
        table = Table(title="changed verdicts (a speedup counts as changed when its interval no longer overlaps the old one)",
                      title_justify="left")
        for column in ("episode", "step", "old", "new", "old speedup", "new speedup", "what"):
            table.add_column(column)
        for c in outcome.changes:
            table.add_row(c.episode, str(c.step), c.old_status, c.new_status, "-" if c.old_speedup is None else f"{c.old_speedup:.2f}x",
                          "-" if c.new_speedup is None else f"{c.new_speedup:.2f}x", c.why)
        console.print(table)
    else:
        console.print("no verdict changed")
    summary, _ = summary_of([folder, folder / "rejudge"])
    print_summary(summary, console, problems=False)
    console.print(f"re-scored batch: {folder / 'rejudge'} (kloop report {folder} {folder / 'rejudge'})")
