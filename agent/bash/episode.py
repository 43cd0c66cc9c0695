"""One bash-mode episode, end to end: what ``kloop run --mode bash`` and batch runs call.

    agent = run_episode(model, problem, config, trajectory, on_step=None)
    agent.exit_status, agent.verdict, agent.spend, agent.messages

``config`` is a RunConfig with ``mode="bash"`` (its ``bash`` settings, budget, harness orders
and sandbox settings); ``trajectory`` the run folder's Trajectory (agent.trajectory, the
loop's format). The shell's sandbox is made here and closed before the submission is judged in a
fresh one (full harness, hidden seeds), so the two never hold GPUs at the same time.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from typing import Any

from agent.bash.agent import BashAgent
from agent.bash.commands import KloopCommands
from agent.bash.config import BashSettings
from agent.bash.shell import Shell
from agent.providers import Model
from agent.run_config import RunConfig, SandboxSettings
from agent.session import EvaluationSession
from agent.trajectory import Trajectory
from problems.contract import Problem
from sandbox.backends import open_sandbox
from sandbox.harness.config import HarnessConfig
from sandbox.report import EvalReport


def judge_submission(source: str, config: RunConfig) -> EvalReport:
    """The episode's verdict: the full harness in a sandbox of its own, on seeds no one saw."""
    harness = config.harness.model_copy(update={"seed": secrets.randbelow(2**62)})
    with EvaluationSession(harness, config.sandbox) as session:
        return session.evaluate(source)


def make_agent(model: Model, problem: Problem, config: RunConfig, trajectory: Trajectory,
               on_step: Callable[[dict[str, Any]], None] | None = None, task_context: dict[str, Any] | None = None) -> BashAgent:
    """A BashAgent with its shell and commands (each a new sandbox, not started yet). Raises
    SandboxError, GpuPoolError or UserError when a sandbox cannot be made."""
    shell, commands = make_shell(problem, config.harness, config.sandbox, config.bash)
    return BashAgent(model, problem, config, shell, commands, trajectory, judge=lambda source: judge_submission(source, config),
                     on_step=on_step, task_context=task_context)


def make_shell(problem: Problem, harness: HarnessConfig, sandbox: SandboxSettings, settings: BashSettings) -> tuple[Shell, KloopCommands]:
    """The agent's shell and the commands it serves, each in a sandbox of its own (not started)."""
    commands = KloopCommands(open_sandbox(sandbox.backend, **sandbox.backend_options(harness)), problem, harness, settings)
    shell = Shell(open_sandbox(sandbox.backend, **sandbox.backend_options(harness)), commands, device=harness.device,
                  output_limit_chars=settings.output_limit_chars)
    return shell, commands


def run_episode(model: Model, problem: Problem, config: RunConfig, trajectory: Trajectory,
                on_step: Callable[[dict[str, Any]], None] | None = None) -> BashAgent:
    agent = make_agent(model, problem, config, trajectory, on_step)
    agent.run()
    return agent
