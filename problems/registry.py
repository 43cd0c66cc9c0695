"""Finds problems by name: one folder per problem under ``problems/<category>/<name>/``, and
problems of outside suites by prefix (``pkb:<id or name>``, see ``problems.pkb``)."""

from __future__ import annotations

import difflib
from functools import cache
from pathlib import Path

from problems.contract import Problem, UnknownProblem
from problems.loader import load_problem
from problems.pkb import load_pkb_problem, load_pkb_ref

PROBLEMS_ROOT = Path(__file__).resolve().parent


@cache
def _folders() -> dict[str, Path]:
    folders: dict[str, Path] = {}
    for problem_file in sorted(PROBLEMS_ROOT.glob("*/*/problem.py")):
        folders[problem_file.parent.name] = problem_file.parent
    return folders


def problem_names() -> list[str]:
    return list(_folders())


@cache
def get_problem(name: str) -> Problem:
    folders = _folders()
    if name not in folders:
        close = difflib.get_close_matches(name, folders, n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else "; `kloop problems` lists them"
        raise UnknownProblem(f"no problem named {name!r}{hint}")
    problem = load_problem(folders[name])
    if problem.spec.name != name:
        raise ValueError(f"{folders[name]}/problem.py names itself {problem.spec.name!r}, not {name!r}")
    if problem.spec.category != folders[name].parent.name:
        raise ValueError(f"{name} declares category {problem.spec.category!r} but lives under {folders[name].parent.name}/")
    return problem


def find_problem(name: str, pkb_root: str | Path | None = None) -> Problem:
    """A suite problem by name, or a ParallelKernelBench one as ``pkb:<id or name>`` from the
    checkout at ``pkb_root`` (default ``$KLOOP_PKB_ROOT``). Errors are :class:`UnknownProblem`
    with a one-line message."""
    if name.startswith("pkb:"):
        return load_pkb_problem(name, pkb_root)
    return get_problem(name)


def load_ref(ref: str) -> Problem:
    """Load a problem from its ``Problem.ref`` (what rank processes are told)."""
    kind, _, location = ref.partition(":")
    if kind == "folder":
        return load_problem(Path(location))
    if kind == "pkb":
        return load_pkb_ref(location)
    raise UnknownProblem(f"cannot load problem reference {ref!r}")


def all_problems() -> list[Problem]:
    return [get_problem(name) for name in problem_names()]
