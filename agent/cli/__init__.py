"""The ``kloop`` command line. It parses and prints; the packages do the work.

One module per command, each holding a function ``command`` (a group of commands: a typer
``app``), registered below with one line. Command modules import only typer, rich, pydantic and
``agent.cli.common`` at import time (``kloop --help`` stays fast); the work is imported inside
the command.
"""

from __future__ import annotations

import signal
import sys

import typer

from agent.cli import eval as eval_
from agent.cli import batch, problems, prompt, rejudge, report, run, sandbox, serve, topology
from agent.cli.common import errors
from agent.errors import UserError

app = typer.Typer(no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
                  help="kernel-loop: LLMs write fast multi-GPU kernels; a trusted harness judges them.")
app.command("eval")(eval_.command)
app.command("problems")(problems.command)
app.command("run")(run.command)
app.command("prompt")(prompt.command)
app.command("topology")(topology.command)
app.command("batch")(batch.command)
app.command("report")(report.command)
app.command("rejudge")(rejudge.command)
app.add_typer(sandbox.app, name="sandbox")
app.add_typer(serve.app, name="serve")


def configure_logging() -> None:
    """Library events go to stderr, warnings and errors only (runs keep their full log in events.jsonl)."""
    import logging

    import structlog

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING),
                        logger_factory=structlog.PrintLoggerFactory(sys.stderr))


class Terminated(KeyboardInterrupt):
    """SIGTERM (``kill``, a scheduler ending a job): unwound like Ctrl-C (exit 130), so sandboxes
    are closed, their processes ended and runs left resumable, instead of the process vanishing
    mid-work; a trajectory says "terminated (SIGTERM)"."""


def _terminate(signum, frame) -> None:
    raise Terminated("terminated (SIGTERM)")


def main() -> None:
    configure_logging()
    signal.signal(signal.SIGTERM, _terminate)
    try:
        app()
    except UserError as error:
        errors.print(f"[bold red]error:[/] {error}", highlight=False, soft_wrap=True)  # one line, however long
        sys.exit(2)
    except OSError as error:
        if error.filename is None:  # not about a path the user named: a fault to see whole
            raise
        # a folder or file the user named that cannot be made, read or written (--out under a read-only or missing place, a
        # full disk): what the system says, about which path
        errors.print(f"[bold red]error:[/] {error.filename}: {error.strerror or error}", highlight=False, soft_wrap=True)
        sys.exit(2)
    except KeyboardInterrupt:
        errors.print("interrupted")
        sys.exit(130)


__all__ = ["UserError", "app", "main"]
