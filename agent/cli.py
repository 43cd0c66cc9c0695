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
    gpus: Optional[str] = typer.Option(None, help="GPUs the evaluation may use, e.g. 0,1,2,3 (default: the first it needs)"),
    image: Optional[str] = typer.Option(None, help="sandbox image for --sandbox docker (default: kernel-loop-sandbox:latest)"),
    as_json: bool = typer.Option(False, "--json", help="print the EvalReport as JSON"),
) -> None:
    """Judge SOLUTION on PROBLEM: correct on every rank? how fast against the PyTorch + NCCL reference?"""
    from agent.sandbox_cli import sandbox_options
    from sandbox.backends import SandboxError, open_sandbox
    from sandbox.evaluate import evaluate_in
    from sandbox.gpu_pool import GpuPoolError

    spec = resolve_problem(problem)
    if size is not None and size not in spec.spec.shapes:
        raise UserError(f"{problem} has no size {size!r}; it has {', '.join(spec.spec.shapes)}")
    check_world(spec, world, device)
    source = read_solution(solution)
    config = harness_config(problem, world, device, size, trials, timed, allow_nccl, reference_cache)
    options = sandbox_options(sandbox, device.value, world, gpus, image)
    try:
        with open_sandbox(sandbox, **options) as box:
            with console.status(f"evaluating {solution.name} on {problem} (world {world}, {device.value})", spinner="dots") if not as_json else _null():
                report = evaluate_in(box, source, config, filename=solution.name if solution.suffix == ".py" else "solution.py")
    except (SandboxError, GpuPoolError) as error:
        raise UserError(str(error)) from None
    if as_json:
        print(report.model_dump_json(indent=2))
    else:
        from agent.render import print_report

        print_report(report, console)
    raise typer.Exit(0 if report.correct else 1)


@app.command("problems")
def problems_command(as_json: bool = typer.Option(False, "--json", help="print as JSON")) -> None:
    """List the problem suite."""
    from problems import all_problems

    problems = all_problems()
    if as_json:
        print(json.dumps([{**p.spec.model_dump(), "folder": str(p.folder)} for p in problems], indent=2, default=str))
        return
    table = Table(show_edge=False)
    for column in ("name", "category", "pattern", "world sizes", "dtype", "origin"):
        table.add_column(column, overflow="fold")
    for p in problems:
        table.add_row(p.name, p.spec.category, p.spec.pattern, ",".join(map(str, p.spec.world_sizes)), p.spec.dtype, p.spec.origin)
    console.print(table)


def _add_subcommands() -> None:
    from agent.sandbox_cli import app as sandbox_app

    app.add_typer(sandbox_app, name="sandbox")


_add_subcommands()


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
