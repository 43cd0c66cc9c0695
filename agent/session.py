"""One sandbox per agent episode; each step is evaluated in its own folder inside it."""

from __future__ import annotations

from typing import Any

from sandbox.backends import Sandbox, open_sandbox
from sandbox.evaluate import evaluate_in
from sandbox.harness.config import HarnessConfig
from sandbox.report import EvalReport


class EvaluationSession:
    def __init__(self, backend: str, config: HarnessConfig, **sandbox_options: Any):
        self.config = config
        self.box: Sandbox = open_sandbox(backend, **sandbox_options)

    def __enter__(self) -> "EvaluationSession":
        self.box.start()
        return self

    def __exit__(self, *exc) -> None:
        self.box.close()

    def evaluate(self, source: str, step: int) -> EvalReport:
        return evaluate_in(self.box, source, self.config, subdir=f"step_{step:03d}")
