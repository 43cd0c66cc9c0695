"""The bash agent: a model works at a shell in the sandbox and ends by submitting a file.

As plain as mini-swe-agent's ``DefaultAgent``: ``run`` calls ``step`` until a terminating
exception; each step asks the model, runs the commands of its answer one at a time in the
shell, and appends their outputs; a malformed answer becomes feedback. The submission is judged
by the full harness after the shell is closed (``judge``), on hidden seeds; that report is the
episode's verdict.

    agent = BashAgent(model, problem, config, shell, commands, trajectory, judge, on_step=None)
    exit_status = agent.run()     # "Submitted", "LimitsExceeded", "ProviderFailed", "RepeatedFormatError", ...
    agent.verdict                 # the final EvalReport, or None without a submission
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from agent import budget as budgets
from agent.base_agent import BaseAgent
from agent.bash.actions import BASH_TOOL, Action, parse_actions
from agent.bash.commands import KloopCommands
from agent.bash.config import BashSettings
from agent.bash.shell import CommandResult, Shell
from agent.control import FormatError, NonTerminating, Submitted, Terminating
from agent.prompting import task_options, task_prompt
from agent.providers import Message, Model, ModelResponse
from agent.run_config import RunConfig
from agent.trajectory import Trajectory
from problems.contract import Problem
from prompts import render
from sandbox.harness.config import HarnessConfig
from sandbox.report import EvalReport

MAX_FORMAT_ERRORS = 3


def bash_task(problem: Problem, harness: HarnessConfig, steps: int, commands: KloopCommands, settings: BashSettings,
              **context: Any) -> str:
    """The task text of a shell episode (also the shell's ``TASK.md``): the problem, the checks the
    commands offer on this machine, the limits of a command's time and output."""
    return task_prompt(problem, harness, steps, template="bash/task", check_trials=settings.check_trials,
                       check_devices=commands.devices(), check_worlds=commands.worlds(harness.device), final_trials=harness.trials,
                       command_timeout_s=settings.command_timeout_s, output_limit_chars=settings.output_limit_chars, **context)


def set_up_home(shell: Shell, problem: Problem, task: str) -> None:
    """The shell's home folder as the episode starts: the public reference and the task."""
    shell.write("reference.py", problem.reference_source)
    shell.write("TASK.md", task)


class RepeatedFormatError(Terminating):
    """The model's answers held no runnable command several times in a row."""


class BashAgent(BaseAgent):
    def __init__(self, model: Model, problem: Problem, config: RunConfig, shell: Shell, commands: KloopCommands,
                 trajectory: Trajectory, judge: Callable[[str], EvalReport],
                 on_step: Callable[[dict[str, Any]], None] | None = None, task_context: dict[str, Any] | None = None):
        super().__init__(model, problem, config, trajectory, on_step, task_context)
        self.shell, self.commands, self.judge = shell, commands, judge
        self.settings = config.bash
        self.tools = self.settings.actions != "text"
        self.verdict: EvalReport | None = None
        self.exit_status = ""
        self.format_errors = 0

    # ------------------------------------------------------------------ the loop
    def run(self) -> str:
        """Run until the model submits or a budget is spent, then judge the submission."""
        with self.trajectory.event_log(problem=self.problem.name, model=self.config.model, mode="bash") as self.log:
            self.log.info("run_started", mode="bash", steps=self.config.budget.steps, tools=self.tools)
            exit_status, message = "Interrupted", "interrupted"
            try:
                with self.commands, self.shell:
                    self._prepare()
                    exit_status, message = self._loop()
                if self.commands.submission is not None:
                    self._judge()
            finally:
                self._finish(exit_status, message)
        return exit_status

    def _loop(self) -> tuple[str, str]:
        while True:
            try:
                self.step()
                self.format_errors = 0
            except NonTerminating as control:
                if control.message:
                    self._feedback(control)
            except Terminating as control:
                return control.exit_status, control.message
            finally:
                self._save()

    def step(self) -> None:
        budgets.check(self.config.budget, self.spend)
        response = self.query()
        assistant = self.messages[-1]
        assistant.extra["actions"] = []
        actions = parse_actions(response, self.tools)
        assistant.extra["actions"] = [action.model_dump(exclude_none=True) for action in actions]
        for index, action in enumerate(actions):
            result = self.execute(action)
            if self.commands.submission is not None:
                for skipped in actions[index + 1:]:
                    self.add("tool" if skipped.tool_call_id else "user", "not run: the episode ended with your submission",
                             tool_call_id=skipped.tool_call_id)
                submission = self.commands.submission
                raise Submitted(f"{submission.file} submitted at step {self.spend.steps}" +
                                ("" if result.returncode == 0 else f" (the command exited with {result.returncode})"))

    def query(self) -> ModelResponse:
        response = self.ask(self.messages, tools=[BASH_TOOL] if self.tools else None)
        message = response.to_message(step=self.spend.steps, finish_reason=response.finish_reason, usage=response.usage.model_dump(),
                                      cost_usd=response.cost_usd, latency_s=response.latency_s, attempts=response.attempts,
                                      timestamp=time.time())
        self.messages.append(message)
        return response

    def execute(self, action: Action) -> CommandResult:
        before = len(self.commands.reports)
        result = self.shell.run(action.command, self.settings.command_timeout_s)
        warning = budgets.near_end(self.config.budget, self.spend)
        note = render("bash/budget", steps_left=warning[0], reason=warning[1]).strip() if warning else ""
        observation = render("bash/observation", **result.model_dump(exclude={"command"}), timeout_s=self.settings.command_timeout_s,
                             limit=self.settings.output_limit_chars, budget_note=note)
        self.add("tool" if action.tool_call_id else "user", observation, tool_call_id=action.tool_call_id, step=self.spend.steps,
                 raw_output=result.output, returncode=result.returncode, timed_out=result.timed_out,
                 exception_info=result.exception, duration_s=result.duration_s, calls=result.calls, timestamp=time.time())
        reports = self.commands.reports[before:]
        status = reports[-1]["status"] if reports else ("timeout" if result.timed_out else f"rc={result.returncode}")
        self.log.info("command", step=self.spend.steps, command=action.command[:500], returncode=result.returncode,
                      timed_out=result.timed_out, duration_s=result.duration_s, calls=result.calls)
        self._record(status=status, message=action.command.strip().splitlines()[0][:200] if action.command.strip() else "",
                     speedup=reports[-1]["speedup"] if reports else None, command_s=result.duration_s)
        return result

    # ------------------------------------------------------------------ helpers
    def add(self, role: str, content: str, tool_call_id: str | None = None, **extra: Any) -> Message:
        message = Message(role=role, content=content, tool_call_id=tool_call_id, extra=extra)
        self.messages.append(message)
        return message

    def _prepare(self) -> None:
        """The task in the conversation and in the shell's home folder."""
        context = {**task_options(self.problem, self.config.cheat_sheet, self.config.examples), **self.task_context}
        task = bash_task(self.problem, self.config.harness, self.config.budget.steps, self.commands, self.settings, **context)
        self.add("system", render("bash/system", tools=self.tools))
        self.add("user", task)
        set_up_home(self.shell, self.problem, task)

    def _feedback(self, control: NonTerminating) -> None:
        """A malformed answer: the feedback goes back as the result of each tool call it made (the
        providers want one per call), else as a user message."""
        self.format_errors += isinstance(control, FormatError)
        calls = self.messages[-1].tool_calls if self.messages and self.messages[-1].role == "assistant" else None
        for call in calls or []:
            self.add("tool", control.message, tool_call_id=call.id, step=self.spend.steps, kind=type(control).__name__)
        if not calls:
            self.add("user", control.message, step=self.spend.steps, kind=type(control).__name__)
        self._record(status=type(control).__name__, message=control.message.splitlines()[0])
        if self.format_errors >= MAX_FORMAT_ERRORS:
            raise RepeatedFormatError(f"{self.format_errors} answers in a row held no runnable command")

    def _judge(self) -> None:
        submission = self.commands.submission
        self.trajectory.write_file("final/solution.py", submission.source)
        self.log.info("judging", file=submission.file)
        self.verdict = self.judge(submission.source)
        self.trajectory.write_file("final/report.json", self.verdict.model_dump_json(indent=2))
        self.log.info("judged", status=self.verdict.status, speedup=self.verdict.speedup)

    def _stats(self) -> dict[str, Any]:
        verdict = None
        if self.verdict is not None:
            verdict = {"status": self.verdict.status, "speedup": self.verdict.speedup, "message": self.verdict.message,
                       "report": "final/report.json"}
        return {**super()._stats(), "verdict": verdict, "commands": self.commands.reports}

    def _finish(self, exit_status: str, message: str) -> None:
        self.exit_status = exit_status
        submission = self.commands.submission
        summary = message or exit_status
        if self.verdict is not None:
            speed = f", {self.verdict.speedup:.2f}x" if self.verdict.speedup is not None else ""
            summary += f"; verdict: {self.verdict.status}{speed} ({self.verdict.message})"
        elif submission is None:
            summary += "; nothing was submitted"
        self.add("exit", summary, exit_status=exit_status, submission=submission.source if submission else "",
                 submitted_file=submission.file if submission else None)
        self.trajectory.save_final(self.messages, exit_status=exit_status, submission=submission.source if submission else "",
                                   message=summary, wall_s=self.spend.wall_s, **self._stats())
        self.log.info("run_finished", exit_status=exit_status, message=summary)
