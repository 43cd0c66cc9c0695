"""``kloop problems``: list the suite with each problem's roofline, or lint it (--check)."""

from __future__ import annotations

import json
from contextlib import nullcontext
from typing import Annotated

import typer

from agent.cli.common import PkbRoot, console, load_problem
from agent.errors import UserError


def command(
    names: Annotated[list[str] | None, typer.Argument(help="problem names (default: all)", show_default=False)] = None,
    check: Annotated[bool, typer.Option("--check", help="lint the problems: run each reference on CPU ranks and check it can judge")] = False,
    world: Annotated[int | None, typer.Option("--world", "-w", help="with --check: only this world size (default: every declared one)")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print as JSON")] = False,
    pkb_root: PkbRoot = None,
    gpu: Annotated[str | None, typer.Option(help="roofline on this GPU model's datasheet (H200, H100, B200, A100); "
                                                    "default: this host, measured where `kloop topology` has measured it")] = None,
) -> None:
    """List the problem suite (and a ParallelKernelBench checkout's problems, as pkb_<id>_<name>), or with --check
    lint it (exit code 1 if any check fails)."""
    import os

    from problems import UnknownProblem, all_problems
    from problems.pkb import ROOT_ENV, pkb_problems
    from sandbox.topology import UnknownGpu, problem_rooflines

    if names:
        problems = [load_problem(name, pkb_root) for name in names]
    else:
        problems = all_problems()
        if pkb_root is not None or os.environ.get(ROOT_ENV):
            try:
                problems += pkb_problems(pkb_root)
            except UnknownProblem as error:
                raise UserError(str(error)) from None
    if check:
        lint(problems, world, as_json)
        return
    try:
        rooflines = problem_rooflines(problems, gpu)
    except UnknownGpu as error:
        raise UserError(str(error)) from None
    if as_json:
        rows = [{**p.spec.model_dump(), "folder": str(p.folder), "roofline_ms": rooflines[p.name] and rooflines[p.name].model_dump()}
                for p in problems]
        print(json.dumps(rows, indent=2, default=str))
        return
    from agent.render import problems_table

    console.print(problems_table(problems, rooflines, f"{gpu} datasheet" if gpu else "this host"))


def lint(problems: list, world: int | None, as_json: bool) -> None:
    """``--check``: each problem at each declared world size (or only ``world``); exit code 1 if any fails."""
    from sandbox.problem_lint import lint_problem

    if world is not None:
        unsupported = [p.name for p in problems if world not in p.spec.world_sizes]
        if unsupported:
            raise UserError(f"world {world} is not declared by {', '.join(unsupported)}; leave out --world to check every declared world size")
    jobs = [(p, w) for p in problems for w in ((world,) if world is not None else p.spec.world_sizes)]
    results = []
    for number, (problem, job_world) in enumerate(jobs, start=1):
        with nullcontext() if as_json else console.status(f"[{number}/{len(jobs)}] {problem.name}, world {job_world}", spinner="dots"):
            results.append(lint_problem(problem, job_world))
    if as_json:
        print(json.dumps([r.model_dump() for r in results], indent=2))
    else:
        from agent.render import lint_renderable

        console.print(lint_renderable(results))
    raise typer.Exit(1 if any(not r.ok for r in results) else 0)
