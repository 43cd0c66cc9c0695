"""Shared plumbing for the benchmark scripts: evaluate a file in a fresh local sandbox, print tables."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import logging  # noqa: E402

import structlog  # noqa: E402

from problems import all_problems  # noqa: E402
from sandbox.backends import LocalSandbox  # noqa: E402
from sandbox.evaluate import evaluate_in  # noqa: E402
from sandbox.harness.config import HarnessConfig  # noqa: E402
from sandbox.report import EvalReport  # noqa: E402


structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))


def evaluate(source: str, **config) -> EvalReport:
    """One full evaluation in its own sandbox (a separate harness job)."""
    with LocalSandbox() as box:
        return evaluate_in(box, source, HarnessConfig(**config))


def problems_with_oracles(names: list[str] | None = None):
    chosen = [p for p in all_problems() if p.oracle_path is not None]
    if names:
        chosen = [p for p in chosen if p.name in names]
    return chosen


def print_table(title: str, header: list[str], rows: list[list]) -> None:
    text = [[("-" if cell is None else f"{cell:.4g}" if isinstance(cell, float) else str(cell)) for cell in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in text)) if text else len(h) for i, h in enumerate(header)]
    print(title)
    print(" | ".join(h.rjust(w) for h, w in zip(header, widths)))
    print("-+-".join("-" * w for w in widths))
    for row in text:
        print(" | ".join(cell.rjust(w) for cell, w in zip(row, widths)))
