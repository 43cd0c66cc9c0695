"""The ``kloop`` command line."""

from __future__ import annotations

import enum
import json
import sys
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

app = typer.Typer(no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
                  help="kernel-loop: LLMs write fast multi-GPU kernels; a trusted harness judges them.")
console = Console()
errors = Console(stderr=True)


class UserError(Exception):
    """A mistake the user can fix; printed as one line, exit code 2."""


class Device(str, enum.Enum):
    cpu = "cpu"
    cuda = "cuda"
    emulate = "emulate"


def resolve_problem(name: str):
    from problems import UnknownProblem, get_problem

    try:
        return get_problem(name)
    except UnknownProblem as error:
        raise UserError(str(error)) from None


def check_world(problem, world: int, device: Device) -> None:
    allowed = (1, *problem.spec.world_sizes)
    if world not in allowed:
        raise UserError(f"{problem.name} is defined for world sizes {', '.join(map(str, problem.spec.world_sizes))} (and 1 for "
                        f"single-GPU timing), not {world}")
    if device != Device.cpu:
        import torch

        if not torch.cuda.is_available():
            raise UserError(f"--device {device.value} needs an NVIDIA GPU and this machine's torch sees none; use --device cpu")
        if device == Device.cuda and torch.cuda.device_count() < world:
            raise UserError(f"--device cuda --world {world} needs {world} GPUs, this machine has {torch.cuda.device_count()}; "
                            f"use --device emulate to run {world} ranks on one GPU (correctness only)")


def read_solution(path: Path) -> str:
    try:
        return path.read_text()
    except FileNotFoundError:
        raise UserError(f"no such file: {path}") from None
    except (OSError, UnicodeDecodeError) as error:
        raise UserError(f"cannot read {path}: {error}") from None


def harness_config(problem: str, world: int, device: Device, size: Optional[str], trials: int, timed: Optional[bool],
                   allow_nccl: bool, reference_cache: bool):
    from sandbox.harness.config import HarnessConfig

    return HarnessConfig(problem=problem, world=world, device=device.value, size=size, trials=trials, timed=timed,
                         allow_nccl=allow_nccl, reference_cache=reference_cache)


@app.command("eval")
def eval_command(
    problem: str = typer.Argument(..., help="problem name (see `kloop problems`)"),
    solution: Path = typer.Argument(..., help="Python file defining solution(*inputs)"),
    world: int = typer.Option(2, "--world", "-w", help="number of ranks"),
    device: Device = typer.Option(Device.cpu, "--device", "-d", help="cpu (gloo), cuda (one GPU per rank) or emulate (all ranks on one GPU)"),
    size: Optional[str] = typer.Option(None, help="named problem size (default: small on cpu, default on GPUs)"),
    trials: int = typer.Option(5, min=1, max=100, help="correctness trials with fresh seeds"),
    timed: Optional[bool] = typer.Option(None, "--timed/--no-timed", help="time reference and candidate (default: yes, except emulate)"),
    allow_nccl: bool = typer.Option(False, help="allow the solution to call torch.distributed collectives"),
    reference_cache: bool = typer.Option(True, help="reuse cached reference outputs and timings"),
    sandbox: str = typer.Option("local", help="local (subprocess) or docker (container)"),
    as_json: bool = typer.Option(False, "--json", help="print the EvalReport as JSON"),
) -> None:
    """Judge SOLUTION on PROBLEM: correct on every rank? how fast against the PyTorch + NCCL reference?"""
    from sandbox.backends import SandboxError, open_sandbox
    from sandbox.evaluate import evaluate_in

    spec = resolve_problem(problem)
    if size is not None and size not in spec.spec.shapes:
        raise UserError(f"{problem} has no size {size!r}; it has {', '.join(spec.spec.shapes)}")
    check_world(spec, world, device)
    source = read_solution(solution)
    config = harness_config(problem, world, device, size, trials, timed, allow_nccl, reference_cache)
    try:
        with open_sandbox(sandbox) as box:
            with console.status(f"evaluating {solution.name} on {problem} (world {world}, {device.value})", spinner="dots") if not as_json else _null():
                report = evaluate_in(box, source, config, filename=solution.name if solution.suffix == ".py" else "solution.py")
    except SandboxError as error:
        raise UserError(str(error)) from None
    if as_json:
        print(report.model_dump_json(indent=2))
    else:
        from agent.render import print_report

        print_report(report, console)
    raise typer.Exit(0 if report.correct else 1)


@app.command("problems")
def problems_command(
    names: Optional[list[str]] = typer.Argument(None, help="problem names (default: all)"),
    check: bool = typer.Option(False, "--check", help="lint the problems: run each reference on CPU ranks and check it can judge"),
    world: Optional[int] = typer.Option(None, "--world", "-w", help="with --check: only this world size (default: every declared one)"),
    as_json: bool = typer.Option(False, "--json", help="print as JSON"),
) -> None:
    """List the problem suite, or with --check lint it (exit code 1 if any check fails)."""
    from problems import all_problems

    problems = [resolve_problem(name) for name in names] if names else all_problems()
    if check:
        lint_command(problems, world, as_json)
        return
    if as_json:
        print(json.dumps([{**p.spec.model_dump(), "folder": str(p.folder)} for p in problems], indent=2, default=str))
        return
    table = Table(show_edge=False)
    for column in ("name", "category", "pattern", "world sizes", "dtype", "origin"):
        table.add_column(column, overflow="fold")
    for p in problems:
        table.add_row(p.name, p.spec.category, p.spec.pattern, ",".join(map(str, p.spec.world_sizes)), p.spec.dtype, p.spec.origin)
    console.print(table)


def lint_command(problems: list, world: Optional[int], as_json: bool) -> None:
    from problems.lint import lint_problem

    if world is not None:
        unsupported = [p.name for p in problems if world not in p.spec.world_sizes]
        if unsupported:
            raise UserError(f"world {world} is not declared by {', '.join(unsupported)}; leave out --world to check every declared size")
    jobs = [(p, w) for p in problems for w in ((world,) if world is not None else p.spec.world_sizes)]
    results = []
    for number, (problem, size) in enumerate(jobs, start=1):
        with console.status(f"[{number}/{len(jobs)}] {problem.name}, world {size}", spinner="dots") if not as_json else _null():
            results.append(lint_problem(problem, size))
    if as_json:
        print(json.dumps([r.model_dump() for r in results], indent=2))
    else:
        table = Table(show_edge=False)
        table.add_column("problem", no_wrap=True)
        for column in ("world", "verdict", "checks", "wall s", "failed checks"):
            table.add_column(column, overflow="fold")
        for r in results:
            failed = "\n".join(f"{c.name}: {c.message}" for c in r.failures)
            table.add_row(r.problem, str(r.world), "[green]ok[/]" if r.ok else "[bold red]FAIL[/]",
                          f"{len(r.checks) - len(r.failures)}/{len(r.checks)}", f"{r.wall_s:.1f}", failed)
        console.print(table)
        bad = sum(not r.ok for r in results)
        console.print(f"{len(results) - bad} of {len(results)} problem x world checks passed", style="red" if bad else "green")
    raise typer.Exit(1 if any(not r.ok for r in results) else 0)


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def main() -> None:
    try:
        app()
    except UserError as error:
        errors.print(f"[bold red]error:[/] {error}", highlight=False)
        sys.exit(2)
    except KeyboardInterrupt:
        errors.print("interrupted")
        sys.exit(130)


if __name__ == "__main__":
    main()
