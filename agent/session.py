"""Where candidates are judged: one sandbox per ``kloop eval`` or agent episode, opened the same
way for both; each evaluation runs in its own folder inside it."""

from __future__ import annotations

from agent.run_config import SandboxSettings
from sandbox.backends import Sandbox, open_sandbox
from sandbox.evaluate import evaluate_in
from sandbox.harness.config import HarnessConfig
from sandbox.report import EvalReport


class EvaluationSession:
    """``with EvaluationSession(harness, settings) as session: session.evaluate(source, step)``.
    Raises SandboxError or GpuPoolError when the sandbox cannot be made or started."""

    def __init__(self, harness: HarnessConfig, sandbox: SandboxSettings | None = None):
        self.config = harness
        settings = sandbox or SandboxSettings()
        self.box: Sandbox = open_sandbox(settings.backend, **settings.backend_options(harness))

    def __enter__(self) -> EvaluationSession:
        self.box.start()
        return self

    def __exit__(self, *exc) -> None:
        self.box.close()

    def evaluate(self, source: str, step: int | None = None, filename: str = "solution.py") -> EvalReport:
        """Judge ``source``; a step's evaluation runs in ``step_NNN/`` (an episode's steps share the sandbox)."""
        return evaluate_in(self.box, source, self.config, filename=filename, subdir="" if step is None else f"step_{step:03d}")
