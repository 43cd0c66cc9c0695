"""The episodes of a batch: models x problems x samples, each with an id that stays the same
between runs of the batch (what resume goes by), and the result one episode leaves."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from agent.batch.config import BatchConfig
from agent.errors import UserError

Outcome = Literal["correct", "failed", "infra", "skipped"]
InfraClass = Literal["provider", "sandbox", "harness", "internal"]


class Episode(BaseModel):
    """One model on one problem, one sample."""

    id: str
    model: str = Field(description="the model's label")
    spec: str
    problem: str = Field(description="the problem's name")
    selector: str = Field(description="what find_problem loads it by (the name, or pkb:<stem>)")
    category: str
    sample: int
    seed: int


class StepPoint(BaseModel):
    """One step of an episode as the per-step curves need it."""

    step: int
    status: str
    speedup: float | None = None


class EpisodeResult(BaseModel):
    """One line of ``results.jsonl``. ``outcome``: ``correct`` (a correct solution was found),
    ``failed`` (the model's failure: no correct solution), ``infra`` (an infrastructure failure
    outlived its retries: excluded from scores), ``skipped`` (the model does not apply, e.g.
    baseline:oracle where the problem has no oracle: excluded from scores)."""

    id: str
    model: str
    spec: str
    problem: str
    category: str
    sample: int
    outcome: Outcome
    correct: bool = False
    speedup: float | None = Field(None, description="the best correct solution's speedup (None: none, or untimed)")
    speedup_ci: list[float] | None = None
    best_step: int | None = None
    best_status: str | None = Field(None, description="the last evaluation's status when nothing was correct")
    steps_used: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float | None = Field(None, description="None when a call's price was unknown")
    wall_s: float = 0.0
    started_at: float | None = Field(None, description="when the try started (Unix time)")
    finished_at: float | None = None
    exit_status: str = ""
    failure_class: str | None = Field(None, description="why it failed: the model's last verdict, or infra:<provider|sandbox|harness|internal>")
    message: str = ""
    attempt: int = 1
    infra_attempts: int = Field(0, description="earlier tries lost to infrastructure failures")
    run_dir: str | None = Field(None, description="the episode's run folder, relative to the batch folder")
    steps: list[StepPoint] = Field(default_factory=list)

    @property
    def scored(self) -> bool:
        return self.outcome in ("correct", "failed")

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-")


def episode_id(label: str, problem: str, sample: int) -> str:
    return f"{slug(label)}__{problem}__s{sample}"


def episode_seed(seed: int, problem: str, sample: int) -> int:
    """The same for every model on one (problem, sample): models are judged on the same inputs."""
    digest = hashlib.sha256(f"{seed}:{problem}:{sample}".encode()).digest()
    return int.from_bytes(digest[:4], "little")


def select_problems(selectors: list[str], pkb_root: Path | None = None) -> list[tuple[str, Any]]:
    """``(selector, Problem)`` for every problem the config names, in order, each once:
    names, ``category:<cat>``, ``pkb:<id or name>``, ``pkb:all`` and ``all`` (the suite)."""
    from problems import UnknownProblem, all_problems, find_problem
    from problems.contract import CATEGORIES

    chosen: dict[str, tuple[str, Any]] = {}
    for selector in selectors:
        try:
            if selector == "all":
                found = [(p.name, p) for p in all_problems()]
            elif selector.startswith("category:"):
                category = selector.partition(":")[2]
                if category not in CATEGORIES:
                    raise UserError(f"problems: unknown category {category!r}; categories: {', '.join(CATEGORIES)}")
                found = [(p.name, p) for p in all_problems() if p.spec.category == category]
            elif selector == "pkb:all":
                from problems.pkb import pkb_problems

                found = [(f"pkb:{p.reference_path.stem}", p) for p in pkb_problems(pkb_root)]
            else:
                problem = find_problem(selector, pkb_root)
                found = [(f"pkb:{problem.reference_path.stem}" if selector.startswith("pkb:") else problem.name, problem)]
        except UnknownProblem as error:
            raise UserError(f"problems: {error}") from None
        for item in found:
            chosen.setdefault(item[1].name, item)
    return list(chosen.values())


def enumerate_episodes(config: BatchConfig) -> list[Episode]:
    """Every episode of the batch, sample-major (sample 0 of everything first, so an early stop
    leaves every model with results on every problem)."""
    problems = select_problems(config.problems, config.pkb_root)
    episodes = []
    for sample in range(config.samples):
        for selector, problem in problems:
            for model in config.models:
                episodes.append(Episode(id=episode_id(model.label, problem.name, sample), model=model.label, spec=model.spec,
                                        problem=problem.name, selector=selector, category=problem.spec.category, sample=sample,
                                        seed=episode_seed(config.seed, problem.name, sample)))
    return episodes


def matches(episode: Episode, pattern: str | None) -> bool:
    """``--filter``: a regular expression searched in the episode id (``model__problem__sN``)."""
    return pattern is None or re.search(pattern, episode.id) is not None
