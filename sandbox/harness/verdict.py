"""The verdict on a candidate: a report status and the one line that says why."""

from __future__ import annotations

from typing import Any


class Verdict(Exception):
    """How a candidate fares. ``status`` is an :class:`~sandbox.report.EvalReport` status, or
    ``"ok"`` from a check it passed. Raised, a verdict ends the evaluation with that status, and
    ``fields`` go into the report."""

    def __init__(self, status: str, message: str = "", **fields: Any):
        super().__init__(message)
        self.status, self.message, self.fields = status, message, fields

    @property
    def ok(self) -> bool:
        return self.status == "ok"
