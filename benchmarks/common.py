"""Shared plumbing for the benchmark scripts: evaluate a file in a fresh local sandbox, print tables."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for _path in (ROOT, ROOT / "benchmarks"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

import logging  # noqa: E402

import structlog  # noqa: E402

from problems import all_problems  # noqa: E402
from sandbox.backends import LocalSandbox  # noqa: E402
from sandbox.evaluate import evaluate_in  # noqa: E402
from sandbox.harness.config import HarnessConfig  # noqa: E402
from sandbox.report import EvalReport  # noqa: E402
from table import print_table  # noqa: E402,F401 - re-exported for the scripts


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
