"""Assembling prompts from the templates in ``prompts/``: what the model is told, from what."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import problems
from agent.budget import Budget, Spend, near_end
from kloop_runtime import settings
from problems.contract import Problem
from prompts import render
from sandbox import topology
from sandbox.atomic_file import atomic_write
from sandbox.harness.config import HarnessConfig
from sandbox.report import EvalReport

if TYPE_CHECKING:
    from agent.loop import BestSolution

MAX_EXAMPLES = 2
INPUT_HELPERS = tuple(Path(problems.__file__).parent / name for name in ("authoring.py", "contract.py"))  # what generators call


def prompt_topology(config: HarnessConfig) -> topology.Topology | None:
    """What the task prompt says about the hardware (None on CPU): this host's measured
    topology when it has been measured (``kloop topology``), else the datasheet."""
    if config.device == "cpu":
        return None
    return topology.host_topology(config.world, cache_root=config.cache_dir)


def system_prompt() -> str:
    return render("system")


def cheat_sheet(hardware: topology.Topology) -> str:
    return render("cheat_sheet.md", topology=hardware)


def oracle_examples(problem: Problem, limit: int = MAX_EXAMPLES) -> list[dict[str, str]]:
    """In-context examples: hand-written solutions (``oracle.py``) of *other* problems, chosen
    by pattern: the same category first, then the most words of the communication pattern in
    common. A problem's own oracle is never shown: it would be the answer."""
    from problems import all_problems

    words = _pattern_words(problem)

    def likeness(other: Problem) -> float:
        theirs = _pattern_words(other)
        return len(words & theirs) / max(len(words | theirs), 1)

    others = [p for p in all_problems() if p.name != problem.name and p.oracle_path is not None]
    others.sort(key=lambda p: (p.spec.category != problem.spec.category, -likeness(p), p.name))
    examples = []
    for other in others[:limit]:
        source = other.oracle_path.read_text()
        summary = _docstring(source).split("\n\n")[0]  # the whole docstring is in the source below
        examples.append({"title": f"{other.name} ({other.spec.pattern})", "note": summary or other.spec.description,
                         "source": source.strip()})
    return examples


PATTERN_STOPWORDS = {"along", "dim", "from", "rank", "with", "per", "call", "the", "of", "and", "to", "in", "on", "equal", "split",
                     "splits", "sizes", "blocks", "row", "rows", "then", "a", "by", "each"}


def _pattern_words(problem: Problem) -> set[str]:
    return set(re.findall(r"[a-z]+", problem.spec.pattern.lower())) - PATTERN_STOPWORDS


def _docstring(source: str) -> str:
    import ast

    try:
        return (ast.get_docstring(ast.parse(source)) or "").strip()
    except SyntaxError:
        return ""


def input_signature(problem: Problem, world: int, size: str, dtype: str, cache_root: Path | None = None) -> list[str] | None:
    """``["bfloat16[33554432]", ...]`` for rank 0's inputs, without allocating them (None if
    the generator cannot run on fake tensors, e.g. data-dependent shapes). Kept under the cache
    root (``prompt-inputs/``), keyed by the problem's sources, the shared input helpers and torch's
    version: working it out imports torch (about a second), which a prompt needs no other way."""
    path = (cache_root or settings.cache_root()) / "prompt-inputs" / f"{_signature_key(problem, world, size, dtype)}.json"
    try:
        kept = json.loads(path.read_text())["inputs"]
        if kept is None or (isinstance(kept, list) and all(isinstance(item, str) for item in kept)):
            return kept
    except (OSError, ValueError, KeyError, TypeError):
        pass
    found = _traced_signature(problem, world, size, dtype)
    try:
        atomic_write(path, json.dumps({"inputs": found}))
    except OSError:
        pass  # a read-only cache: worked out again next time
    return found


def _signature_key(problem: Problem, world: int, size: str, dtype: str) -> str:
    from importlib import metadata

    digest = hashlib.sha256(f"{problem.name}|{problem.source_hash()}|{world}|{size}|{dtype}|".encode())
    for helper in INPUT_HELPERS:
        digest.update(helper.read_bytes())
    try:
        digest.update(metadata.version("torch").encode())
    except metadata.PackageNotFoundError:
        pass
    return digest.hexdigest()[:24]


def _traced_signature(problem: Problem, world: int, size: str, dtype: str) -> list[str] | None:
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    try:
        with FakeTensorMode():
            generator = torch.Generator().manual_seed(0)
            inputs = problem.inputs(0, world, generator, torch.device("cpu"), getattr(torch, dtype), problem.shape(size))
    except Exception:  # noqa: BLE001 - best effort: the prompt then shows the shape parameters only
        return None
    return [describe_input(x) for x in inputs]


def describe_input(x) -> str:
    """``bfloat16[4, 8]`` for a tensor, the same inside lists and tuples, ``repr`` for the rest."""
    import torch

    if isinstance(x, torch.Tensor):
        return f"{str(x.dtype).removeprefix('torch.')}{list(x.shape)}"
    if isinstance(x, (list, tuple)) and not isinstance(x, torch.Size):
        inner = ", ".join(describe_input(item) for item in x)
        return f"[{inner}]" if isinstance(x, list) else f"({inner}{',' if len(x) == 1 else ''})"
    return repr(x)


def task_prompt(problem: Problem, config: HarnessConfig, steps: int, *, cheat_sheet_on: bool = False,
                examples: list[dict] | tuple = (), hardware: topology.Topology | None = None, template: str = "task",
                **extra: Any) -> str:
    """The first user message. ``hardware`` overrides this host's topology (tests render with a
    fixed one); the cheat sheet is only for GPU runs. ``template`` (one that extends ``task``,
    e.g. ``bash/task``) and ``extra`` (its own variables) are for other modes."""
    size = config.resolved_size()
    shape = problem.shape(size)
    dtype = config.dtype or problem.spec.dtype
    topo = hardware if hardware is not None and config.device != "cpu" else prompt_topology(config)
    bound = None
    if topo is not None and config.device == "cuda":
        bound = topology.roofline_for(topo, problem.cost_at(config.world, size, dtype))
    sheet = cheat_sheet(topo) if cheat_sheet_on and topo is not None else ""
    return render(
        template, problem=problem.spec, reference_source=problem.reference_source.strip(), world=config.world,
        inputs=input_signature(problem, config.world, size, dtype, config.cache_dir) or [], size=size, shape=shape, dtype=dtype,
        device=config.device, topology=topo, roofline=bound, allow_nccl=config.allow_nccl, steps=steps,
        cheat_sheet=sheet.strip(), examples=list(examples), pkb_helpers=problem.compat == "pkb", **extra,
    )


def task_options(problem: Problem, cheat_sheet_on: bool, examples_on: bool, device: str = "cuda") -> dict[str, Any]:
    """The switches of a run turned into ``task_prompt`` keyword arguments. The oracle examples
    are CUDA programs: a CPU run (torch-level code) is not shown them."""
    return {"cheat_sheet_on": cheat_sheet_on, "examples": oracle_examples(problem) if examples_on and device != "cpu" else []}


def feedback_prompt(report: EvalReport, step: int, budget: Budget, spend: Spend, best: BestSolution | None) -> str:
    warning = near_end(budget, spend)
    budget_note = render("budget", steps_left=warning[0], reason=warning[1]) if warning else ""
    return render("feedback", report=report, step=step, steps=budget.steps, best=best, budget_note=budget_note.strip())
