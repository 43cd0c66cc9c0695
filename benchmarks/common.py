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


def clock_line(report: EvalReport) -> str:
    """The clock check's numbers in one line (ms per call): what a reader of a GPU log needs to set its allowances."""
    check = report.timing_check
    if check is None:
        return "no clock check"
    alone = report.reference_alone_ms
    beside = report.reference_timing.median_ms if report.reference_timing else None
    ratio = f", reference beside/alone {beside / alone:.3f}" if alone and beside else ""
    return (f"unclaimed candidate {check.candidate_unclaimed_ms:.4f} reference {check.reference_unclaimed_ms:.4f} "
            f"(harness offset {check.harness_offset_ms:.4f}, allowed excess {check.allowed_excess_ms:.4f}); staging candidate "
            f"{check.candidate_staging_ms:.4f} reference {check.reference_staging_ms:.4f} (offset {check.staging_offset_ms:.4f}, "
            f"allowed {check.allowed_staging_excess_ms:.4f}); clock estimate {check.clock_estimate_ms:.4f} floor "
            f"{check.clock_floor_ms:.4f}{ratio}")
