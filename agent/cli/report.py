"""``kloop report``: the leaderboard of one or more batch folders, and the HTML report."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from agent.cli.common import console


def command(
    folders: Annotated[list[Path], typer.Argument(metavar="DIR...", show_default=False, help="batch folders (kloop batch --out)")],
    html: Annotated[Path | None, typer.Option("--html", help="write the report page here (default: DIR/report.html of the first DIR)")] = None,
    problems: Annotated[bool, typer.Option(help="also show the per-problem comparison")] = True,
) -> None:
    """Show the leaderboard of batch folders (side by side when several) and write report.html."""
    from agent.batch.leaderboard import print_summary
    from agent.batch.report import write_html

    target = html or folders[0] / "report.html"
    summary = write_html(folders, target)
    print_summary(summary, console, problems=problems)
    console.print(f"report: {target}")
