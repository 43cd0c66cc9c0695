"""One bash-mode episode, end to end: what ``kloop run --mode bash`` and batch runs call.

    agent = run_episode(model, problem, config, trajectory, on_step=None)
    agent.exit_status, agent.verdict, agent.spend, agent.messages

``config`` is a RunConfig with ``mode="bash"`` (its ``bash`` settings, budget, harness orders
and sandbox settings); ``trajectory`` a MiniTrajectory (agent.bash.trajectory) of the run
folder. The shell's sandbox is made here and closed before the submission is judged in a
fresh one (full harness, hidden seeds), so the two never hold GPUs at the same time.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from typing import Any

from agent.bash.agent import BashAgent
from agent.bash.commands import KloopCommands
from agent.bash.shell import Shell
from agent.providers import Model
from agent.run_config import RunConfig
from agent.session import EvaluationSession
from agent.trajectory import Trajectory
from problems.spec import Problem
from sandbox.backends import open_sandbox
from sandbox.report import EvalReport


def judge_submission(source: str, config: RunConfig) -> EvalReport:
    """The episode's verdict: the full harness in a sandbox of its own, on seeds no one saw."""
    harness = config.harness.model_copy(update={"seed": secrets.randbelow(2**62)})
    with EvaluationSession(harness, config.sandbox) as session:
        return session.evaluate(source)


def make_agent(model: Model, problem: Problem, config: RunConfig, trajectory: Trajectory,
               on_step: Callable[[dict[str, Any]], None] | None = None, task_context: dict[str, Any] | None = None) -> BashAgent:
    """A BashAgent with its shell (a new sandbox, not started yet) and commands. Raises
    SandboxError, GpuPoolError or UserError when the sandbox cannot be made."""
    box = open_sandbox(config.sandbox.backend, **config.sandbox.backend_options(config.harness))
    commands = KloopCommands(box, problem, config.harness, config.bash)
    shell = Shell(box, commands, device=config.harness.device, output_limit_chars=config.bash.output_limit_chars)
    return BashAgent(model, problem, config, shell, commands, trajectory, judge=lambda source: judge_submission(source, config),
                     on_step=on_step, task_context=task_context)


def run_episode(model: Model, problem: Problem, config: RunConfig, trajectory: Trajectory,
                on_step: Callable[[dict[str, Any]], None] | None = None) -> BashAgent:
    agent = make_agent(model, problem, config, trajectory, on_step)
    agent.run()
    return agent
