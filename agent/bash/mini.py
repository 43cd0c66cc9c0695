"""mini-swe-agent in kloop's sandbox: an environment class for mini-swe-agent's agents.

    from minisweagent.agents.default import DefaultAgent
    from agent.bash.mini import KloopEnvironment

    env = KloopEnvironment(problem="all_reduce", device="cpu", allow_nccl=True)
    agent = DefaultAgent(model, env, **agent_config)     # your mini-swe-agent config
    agent.run(env.task)                                  # the task text; also {{task}} in templates
    verdict = env.judge()                                # the submission through the full harness
    env.close()

Each ``execute`` runs the command in the agent's shell (agent.bash.shell: the judge's jail,
no keys, no network, everything killed at the end, an in-sandbox timeout, output cut to head
and tail), with kloop's ``check``, ``bench``, ``profile`` and ``submit`` on the PATH.
``submit FILE`` ends the run (mini-swe-agent's ``Submitted``), and so does mini-swe-agent's own
convention (a first output line ``COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT``, the rest of the
output being the solution's source). Needs the ``[mini]`` extra (mini-swe-agent 2.x).
"""

from __future__ import annotations

import platform
import shlex
from pathlib import Path
from typing import Any

from minisweagent.exceptions import Submitted
from pydantic import BaseModel, Field

from agent.bash.agent import bash_task, set_up_home
from agent.bash.commands import Submission
from agent.bash.config import BashSettings
from agent.bash.episode import make_shell
from agent.run_config import RunConfig, SandboxSettings, harness_config
from sandbox.harness.config import DeviceMode
from sandbox.report import EvalReport

SUBMIT_MARKER = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"


class KloopEnvironmentConfig(BaseModel):
    problem: str = Field(description="a suite problem name, or pkb:<id> with pkb_root")
    world: int = 2
    device: DeviceMode = "cpu"
    size: str | None = None
    trials: int = Field(5, description="correctness trials of the final judge")
    allow_nccl: bool = False
    pkb_root: Path | None = None
    backend: str = Field("local", description="local or docker")
    gpus: str | None = None
    image: str | None = None
    timeout: int = Field(300, description="seconds a command may run (mini-swe-agent's name)")
    output_limit_chars: int = 10_000
    check_trials: int = 2
    steps: int = Field(50, description="the step limit the task text announces (set the agent's step_limit to match)")


class KloopEnvironment:
    """mini-swe-agent's Environment protocol (``execute``, ``get_template_vars``, ``serialize``)
    over kloop's agent shell. The sandbox starts here and ends with ``close``."""

    def __init__(self, *, config_class: type = KloopEnvironmentConfig, **kwargs: Any):
        from problems import find_problem

        self.config = config_class(**kwargs)
        c = self.config
        self.problem = find_problem(c.problem, c.pkb_root)
        self.harness = harness_config(self.problem, world=c.world, device=c.device, size=c.size, trials=c.trials, allow_nccl=c.allow_nccl)
        self.sandbox = SandboxSettings(backend=c.backend, gpus=c.gpus, image=c.image)
        self.settings = BashSettings(actions="tools", command_timeout_s=c.timeout, output_limit_chars=c.output_limit_chars,
                                     check_trials=c.check_trials)
        self.shell, self.commands = make_shell(self.problem, self.harness, self.sandbox, self.settings)
        self.task = bash_task(self.problem, self.harness, c.steps, self.commands, self.settings)
        self.commands.__enter__()
        self.shell.__enter__()
        self._open = True
        set_up_home(self.shell, self.problem, self.task)

    @property
    def submission(self) -> Submission | None:
        return self.commands.submission

    def execute(self, action: dict, cwd: str = "", *, timeout: int | None = None) -> dict[str, Any]:
        command = action.get("command", "") if isinstance(action, dict) else str(action)
        if cwd:
            command = f"cd {shlex.quote(cwd)} && {command}"
        result = self.shell.run(command, float(timeout or self.config.timeout))
        exception = result.exception or (f"the command timed out after {timeout or self.config.timeout} s and was killed, with every "
                                         f"process it started" if result.timed_out else "")
        output = {"output": result.output, "returncode": result.returncode, "exception_info": exception,
                  "extra": {"elided_chars": result.elided_chars, "duration_s": result.duration_s, "kloop_calls": result.calls}}
        lines = result.output.lstrip().splitlines(keepends=True)
        if self.commands.submission is None and lines and lines[0].strip() == SUBMIT_MARKER and result.returncode == 0:
            self.commands.submit("(output)", "".join(lines[1:]))
        if self.commands.submission is not None:
            submission = self.commands.submission
            raise Submitted({"role": "exit", "content": f"{submission.file} submitted",
                             "extra": {"exit_status": "Submitted", "submission": submission.source}})
        return output

    def judge(self) -> EvalReport | None:
        """The submission's verdict: the full harness on hidden seeds, in a sandbox of its own
        (this one is closed first). None when nothing was submitted."""
        from agent.bash.episode import judge_submission

        self.close()
        if self.commands.submission is None:
            return None
        config = RunConfig(problem=self.config.problem, model="mini-swe-agent", mode="bash", harness=self.harness, sandbox=self.sandbox)
        return judge_submission(self.commands.submission.source, config)

    def get_template_vars(self, **kwargs: Any) -> dict[str, Any]:
        return {**self.config.model_dump(mode="json"), **platform.uname()._asdict(), "task": self.task,
                "reference": self.problem.reference_source, **kwargs}

    def serialize(self) -> dict:
        return {"info": {"config": {"environment": self.config.model_dump(mode="json"),
                                    "environment_type": f"{type(self).__module__}.{type(self).__name__}"}}}

    def close(self) -> None:
        if self._open:
            self._open = False
            self.shell.__exit__(None, None, None)
            self.commands.__exit__(None, None, None)

    def __enter__(self) -> KloopEnvironment:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
