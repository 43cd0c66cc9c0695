"""kloop's commands in the agent's shell, answered outside it: ``check``, ``bench`` and
``profile`` run the real harness (public seeds) in the episode's sandbox, outside the jail;
``submit`` records the final answer, which the full harness judges after the episode's last
command (agent.bash.episode), on hidden seeds.

Requests come from the jail and are hostile: the tool, a display name, the file's text and a
few options, each checked here against what the problem and the sandbox allow.
"""

from __future__ import annotations

from typing import Any

import structlog
from pydantic import BaseModel

from agent.bash.config import BashSettings
from agent.errors import UserError
from agent.run_config import harness_config
from problems.contract import Problem
from prompts import render
from sandbox.backends import Sandbox
from sandbox.evaluate import SequentialEvaluator
from sandbox.harness.config import HarnessConfig, gpus_needed

log = structlog.get_logger(__name__)

MIN_SECONDS = 5.0


class Submission(BaseModel):
    file: str
    source: str


class KloopCommands:
    """Answers one episode's calls (``__call__(request, seconds_left)``); ``submission`` once
    ``submit`` was called; ``reports`` keeps every harness report (for the trajectory).

    ``box`` is a sandbox of its own, not the shell's: a backend ends whatever a command left
    running in its sandbox when the command returns, and the shell's command is still running
    while its ``check`` is judged. Started and closed with this object (``with commands:``)."""

    def __init__(self, box: Sandbox | None, problem: Problem, harness: HarnessConfig, settings: BashSettings):
        self.box, self.problem, self.harness, self.settings = box, problem, harness, settings
        self.submission: Submission | None = None
        self.reports: list[dict[str, Any]] = []
        self.evaluator = SequentialEvaluator(box, warm=True)  # an episode's checks, one after another

    def __enter__(self) -> KloopCommands:
        self.box.start()
        return self

    def __exit__(self, *exc) -> None:
        try:
            self.evaluator.close()
        finally:
            self.box.close()

    def devices(self) -> list[str]:
        """Device modes a check may use: the episode's, emulation on a GPU episode, and cpu."""
        return {"cuda": ["cuda", "emulate", "cpu"], "emulate": ["emulate", "cpu"]}.get(self.harness.device, ["cpu"])

    def worlds(self, device: str) -> list[int]:
        """World sizes a check may use on ``device``: the problem's, within the sandbox's GPUs on cuda."""
        sizes = sorted({1, *self.problem.spec.world_sizes})
        if device == "cuda":
            gpus = gpus_needed(self.harness.device, self.harness.world)
            sizes = [w for w in sizes if w <= gpus]
        return sizes

    def __call__(self, request: dict[str, Any], seconds_left: float) -> dict[str, Any]:
        tool, file = request["tool"], request["file"]
        if tool == "submit":
            return self.submit(file, request["source"])
        try:
            config = self.config_for(tool, request.get("options") or {})
        except UserError as error:
            return self.refuse(tool, str(error))
        if seconds_left < MIN_SECONDS:
            return self.refuse(tool, f"only {seconds_left:.0f} s of this command's time is left; run it as a command of its own")
        index = len(self.reports) + 1
        report = self.evaluator.evaluate(request["source"], config, subdir=f"checks/{index:03d}", timeout_s=seconds_left)
        self.reports.append({"tool": tool, "file": file, "status": report.status, "speedup": report.speedup,
                             "world": config.world, "device": config.device, "wall_s": report.wall_s})
        log.info("kloop command", tool=tool, status=report.status, world=config.world, device=config.device)
        text = render("bash/tool_report", tool=tool, file=file, report=report, trials=config.trials, seed=config.seed)
        return {"text": text, "exit_code": 0 if report.correct else 1}

    def config_for(self, tool: str, options: dict[str, Any]) -> HarnessConfig:
        """The harness's orders for one call; a UserError says what is not allowed."""
        device = options.get("device", self.harness.device)
        if device not in self.devices():
            raise UserError(f"--device {device} is not available here; use one of {', '.join(self.devices())}")
        if tool == "bench" and device == "emulate":
            raise UserError("emulation is never timed (all ranks share one GPU); bench needs --device cuda or cpu")
        if tool == "profile" and device != "cuda":
            raise UserError("profiles are taken on GPUs only (device cuda)" + ("" if "cuda" in self.devices() else
                                                                                 "; this sandbox has none"))
        world = options.get("world", self.harness.world)
        if world not in self.worlds(device):
            raise UserError(f"--world {world} is not available on {device}; use one of {', '.join(map(str, self.worlds(device)))}")
        fields = {"world": world, "device": device, "size": options.get("size", self.harness.size if device == self.harness.device else None),
                  "trials": self.settings.check_trials if tool == "check" else 1, "seed": self.settings.public_seed,
                  "timed": tool != "check", "profile": tool == "profile", "stress_calls": 0, "profile_cache": tool == "profile"}
        base = self.harness.model_dump(exclude={"problem", "problem_ref", "solution", *fields})
        return harness_config(self.problem, **base, **fields)

    def submit(self, file: str, source: str) -> dict[str, Any]:
        if self.submission is not None:
            return self.refuse("submit", f"{self.submission.file} was already submitted; the episode ends after this command")
        self.submission = Submission(file=file, source=source)
        return {"text": render("bash/submitted", file=file, size=len(source.encode())), "exit_code": 0}

    @staticmethod
    def refuse(tool: str, reason: str) -> dict[str, Any]:
        return {"text": render("bash/tool_refused", tool=tool, reason=reason), "exit_code": 2}
