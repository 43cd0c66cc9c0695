"""Where candidates are judged: one sandbox per ``kloop eval`` or agent episode, opened the same
way for both; each evaluation runs in its own folder inside it.

An episode judges one candidate after another, so in the local sandbox its evaluations go through
one long-lived harness (``sandbox.evaluate.WarmEvaluator``): the harness process, its imports and
the reference's group (loaded, its time alone measured) are kept from one step to the next, and
the next step's candidate group starts while the model writes it; a group that ran candidate code
still ends with its evaluation. A single evaluation (``kloop eval``, a bash episode's verdict) has
nothing to keep and runs one ``python -m sandbox.harness``, as does any evaluation in Docker.
"""

from __future__ import annotations

from agent.run_config import SandboxSettings
from sandbox.backends import Sandbox, open_sandbox
from sandbox.evaluate import SequentialEvaluator
from sandbox.harness.config import HarnessConfig
from sandbox.report import EvalReport


class EvaluationSession:
    """``with EvaluationSession(harness, settings, warm=True) as session: session.evaluate(source, step)``.
    ``warm``: several evaluations to come (an episode), judged through one long-lived harness where
    the sandbox allows it. Raises SandboxError or GpuPoolError when the sandbox cannot be made or started."""

    def __init__(self, harness: HarnessConfig, sandbox: SandboxSettings | None = None, warm: bool = False):
        self.config = harness
        settings = sandbox or SandboxSettings()
        self.box: Sandbox = open_sandbox(settings.backend, **settings.backend_options(harness))
        self.evaluator = SequentialEvaluator(self.box, warm)

    def __enter__(self) -> EvaluationSession:
        self.box.start()
        return self

    def __exit__(self, *exc) -> None:
        try:
            self.evaluator.close()
        finally:
            self.box.close()

    def evaluate(self, source: str, step: int | None = None, filename: str = "solution.py") -> EvalReport:
        """Judge ``source``; a step's evaluation runs in ``step_NNN/`` (an episode's steps share the sandbox)."""
        return self.evaluator.evaluate(source, self.config, filename=filename, subdir="" if step is None else f"step_{step:03d}")
