"""Pseudo-models that anchor a comparison: ``baseline:reference`` answers with the problem's own
reference program (speedup about 1 by construction; it calls NCCL, so it needs allow_nccl), and
``baseline:oracle`` with the problem's hand-written oracle (``oracle.py``) where it has one.

They need the problem: ``make_model("baseline:oracle", problem=problem)``. Every call returns
the same answer, free; an oracle asked of a problem without one is :class:`BaselineUnavailable`
(batches record such an episode as skipped, not as a failure of the baseline).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from agent.providers.base import FatalProviderError, Message, ModelResponse, ToolSpec, Usage

if TYPE_CHECKING:
    from problems.contract import Problem

BASELINES = ("reference", "oracle")


class BaselineUnavailable(FatalProviderError):
    """The baseline has nothing for this problem (no oracle)."""


def baseline_source(kind: str, problem: Problem) -> str:
    if kind == "reference":
        return problem.reference_source
    path = problem.oracle_path
    if path is None:
        raise BaselineUnavailable(f"{problem.name} has no hand-written oracle (oracle.py), so baseline:oracle has no answer for it")
    return path.read_text()


class BaselineModel:
    provider = "baseline"

    def __init__(self, spec: str, kind: str, problem: Problem | None):
        if kind not in BASELINES:
            raise FatalProviderError(f"unknown baseline {kind!r}: baseline:reference or baseline:oracle")
        if problem is None:
            raise FatalProviderError(f"{spec} answers from the problem's own files and needs the problem (make_model(..., problem=...))")
        self.spec, self.name, self.problem = spec, kind, problem
        source = baseline_source(kind, problem)
        what = "the problem's own reference program" if kind == "reference" else "the problem's hand-written oracle"
        self.text = f"The {kind} baseline: {what}, unchanged.\n\n```python\n{source.rstrip()}\n```\n"

    def complete(self, messages: list[Message], tools: list[ToolSpec] | None = None, *, deadline: float | None = None,
                 progress: Any = None, **_: Any) -> ModelResponse:
        started = time.monotonic()
        return ModelResponse(text=self.text, finish_reason="stop", usage=Usage(), cost_usd=0.0, model=self.spec,
                             latency_s=time.monotonic() - started)
