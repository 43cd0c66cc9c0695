"""Shared plumbing for the benchmark scripts: evaluate a file in a fresh local sandbox, print tables."""

from __future__ import annotations

import logging

import structlog
from paths import ROOT  # noqa: F401 - re-exported; before the project imports: puts the repository on sys.path
from table import print_table  # noqa: F401 - re-exported for the scripts

from problems import all_problems
from sandbox.backends import LocalSandbox
from sandbox.evaluate import evaluate_in
from sandbox.harness.config import HarnessConfig
from sandbox.report import EvalReport

structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))


def evaluate(source: str, filename: str = "solution.py", **config) -> EvalReport:
    """One full evaluation in its own sandbox (a separate harness job); ``config``: HarnessConfig's fields."""
    with LocalSandbox() as box:
        return evaluate_in(box, source, HarnessConfig(**config), filename=filename)


def problems_with_oracles(names: list[str] | None = None):
    chosen = [p for p in all_problems() if p.oracle_path is not None]
    if names:
        chosen = [p for p in chosen if p.name in names]
    return chosen
