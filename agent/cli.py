"""The ``kloop`` command line."""

from __future__ import annotations

import enum
import json
import sys
from contextlib import nullcontext
from pathlib import Path
from typing import Optional, get_args

import typer
from rich.console import Console
from rich.table import Table

from agent.errors import UserError
from sandbox.harness.config import DeviceMode

app = typer.Typer(no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
                  help="kernel-loop: LLMs write fast multi-GPU kernels; a trusted harness judges them.")
console = Console()
errors = Console(stderr=True)


# The typer choice of device modes, made from the one definition (the harness's DeviceMode).
Device = enum.Enum("Device", {mode: mode for mode in get_args(DeviceMode)}, type=str)


PROBLEM_HELP = "problem name (see `kloop problems`), or pkb:<id or name> from a ParallelKernelBench checkout (--pkb-root)"
PKB_ROOT_HELP = "ParallelKernelBench checkout that pkb:<id> problems are loaded from (default: $KLOOP_PKB_ROOT)"


def load_problem(name: str, pkb_root: Optional[Path] = None):
    from problems import UnknownProblem, find_problem

    try:
        return find_problem(name, pkb_root)
    except UnknownProblem as error:
        raise UserError(str(error)) from None


def check_world_size(problem, world: int) -> None:
    """``world`` must be one the problem declares, or 1 (single-GPU timing)."""
    if world not in (1, *problem.spec.world_sizes):
        raise UserError(f"{problem.name} is defined for world sizes {', '.join(map(str, problem.spec.world_sizes))} (and 1 for "
                        f"single-GPU timing), not {world}")


def check_world(problem, world: int, device: Device) -> None:
    """``world`` is declared by the problem, and this machine can run it on ``device``."""
    check_world_size(problem, world)
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


def harness_config(problem, world: int, device: Device, size: Optional[str], trials: int, timed: Optional[bool],
                   allow_nccl: bool, reference_cache: bool, stress_calls: int = 0):
    """The harness's orders for ``problem`` (a loaded Problem): suite problems go by name, others
    (ParallelKernelBench's) by their ``ref``, which the harness and its ranks load again. A ``size``
    the problem does not define is a UserError."""
    from sandbox.harness.config import HarnessConfig

    if size is not None and size not in problem.spec.shapes:
        raise UserError(f"{problem.name} has no size {size!r}; it has {', '.join(problem.spec.shapes)}")

    problem_ref = None if problem.ref.startswith("folder:") else problem.ref
    return HarnessConfig(problem=problem.name, problem_ref=problem_ref, world=world, device=device.value, size=size, trials=trials,
                         timed=timed, allow_nccl=allow_nccl, reference_cache=reference_cache, stress_calls=stress_calls)


@app.command("eval")
def eval_command(
    problem_name: str = typer.Argument(..., metavar="PROBLEM", help=PROBLEM_HELP),
    solution: Path = typer.Argument(..., metavar="SOLUTION", help="Python file defining solution(*inputs)"),
    world: int = typer.Option(2, "--world", "-w", help="number of ranks"),
    device: Device = typer.Option(Device.cpu, "--device", "-d", help="cpu (gloo), cuda (one GPU per rank) or emulate (all ranks on one GPU)"),
    size: Optional[str] = typer.Option(None, help="named problem size (default: `default` in cuda mode, `small` on cpu and in emulation)"),
    trials: int = typer.Option(5, min=1, max=100, help="correctness trials with fresh seeds"),
    stress: int = typer.Option(0, min=0, help="also make this many back-to-back calls and check every output"),
    timed: Optional[bool] = typer.Option(None, "--timed/--no-timed", help="time reference and candidate (default: yes, except emulate)"),
    allow_nccl: bool = typer.Option(False, help="allow the solution to call torch.distributed collectives"),
    reference_cache: bool = typer.Option(True, help="reuse cached reference outputs and timings"),
    sandbox: str = typer.Option("local", help="local (subprocess) or docker (container)"),
    gpus: Optional[str] = typer.Option(None, help="GPUs the evaluation may use, e.g. 0,1,2,3 (default: the first it needs)"),
    image: Optional[str] = typer.Option(None, help="sandbox image for --sandbox docker (default: kernel-loop-sandbox:latest)"),
    as_json: bool = typer.Option(False, "--json", help="print the EvalReport as JSON"),
    pkb_root: Optional[Path] = typer.Option(None, "--pkb-root", help=PKB_ROOT_HELP),
) -> None:
    """Judge SOLUTION on PROBLEM: correct on every rank? how fast against the PyTorch + NCCL reference?"""
    from agent.sandbox_cli import sandbox_options
    from sandbox.backends import SandboxError, open_sandbox
    from sandbox.evaluate import evaluate_in
    from sandbox.gpu_pool import GpuPoolError

    problem = load_problem(problem_name, pkb_root)
    config = harness_config(problem, world, device, size, trials, timed, allow_nccl, reference_cache, stress)
    check_world(problem, world, device)
    source = read_solution(solution)
    options = sandbox_options(sandbox, device.value, world, gpus, image)
    try:
        with open_sandbox(sandbox, **options) as box:
            with console.status(f"evaluating {solution.name} on {problem_name} (world {world}, {device.value})", spinner="dots") if not as_json else nullcontext():
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
def problems_command(
    names: Optional[list[str]] = typer.Argument(None, help="problem names (default: all)"),
    check: bool = typer.Option(False, "--check", help="lint the problems: run each reference on CPU ranks and check it can judge"),
    world: Optional[int] = typer.Option(None, "--world", "-w", help="with --check: only this world size (default: every declared one)"),
    as_json: bool = typer.Option(False, "--json", help="print as JSON"),
    pkb_root: Optional[Path] = typer.Option(None, "--pkb-root", help="also list the problems of this ParallelKernelBench checkout "
                                            "(default: $KLOOP_PKB_ROOT, when set)"),
    gpu: Optional[str] = typer.Option(None, help="roofline on this GPU model's datasheet (H200, H100, B200, A100); "
                                                 "default: this host, measured where `kloop topology` has measured it"),
) -> None:
    """List the problem suite (and a ParallelKernelBench checkout's problems, as pkb_<id>_<name>), or with --check
    lint it (exit code 1 if any check fails)."""
    import os

    from problems import UnknownProblem, all_problems
    from problems.pkb import ROOT_ENV, pkb_problems

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
        lint_command(problems, world, as_json)
        return
    topologies = {world: roofline_topology(world, gpu) for world in {max(p.spec.world_sizes) for p in problems}}
    bounds = {p.name: roofline_ms(p, topologies[max(p.spec.world_sizes)]) for p in problems}
    if as_json:
        print(json.dumps([{**p.spec.model_dump(), "folder": str(p.folder), "roofline_ms": bounds[p.name]} for p in problems],
                         indent=2, default=str))
        return
    where = f"{gpu} datasheet" if gpu else "this host"
    table = Table(show_edge=False, title=f"roofline: default size at the largest declared world size, {where}", title_justify="left")
    for column in ("name", "category", "pattern", "world sizes", "dtype", "roofline ms", "origin"):
        table.add_column(column, overflow="fold")
    for p in problems:
        bound = bounds[p.name]
        shown = "-" if bound is None else f"{bound['ms']:.3g} ({bound['limiter']}, W={bound['world']})"
        table.add_row(p.name, p.spec.category, p.spec.pattern, ",".join(map(str, p.spec.world_sizes)), p.spec.dtype, shown, p.spec.origin)
    console.print(table)


def roofline_topology(world: int, gpu: Optional[str]):
    """The topology rooflines are computed on: ``gpu``'s datasheet, else this host's."""
    from sandbox import topology

    if not gpu:
        return topology.host_topology(world)
    topo = topology.datasheet_topology(gpu, world)
    if topo is None:
        raise UserError(f"no datasheet for GPU {gpu!r}; known: {', '.join(topology.DATASHEET)}")
    return topo


def roofline_ms(problem, topo) -> Optional[dict]:
    """The fastest a solution could run: default size, largest declared world size, on ``topo``
    (from :func:`roofline_topology` for that world size)."""
    from sandbox import topology

    world = max(problem.spec.world_sizes)
    bound = topology.roofline_for(topo, problem.cost_at(world))
    if bound is None:
        return None
    return {"ms": round(bound.bound_ms, 6), "limiter": bound.limiter, "world": world, "gpu": topo.gpu_name}


class Mode(str, enum.Enum):
    loop = "loop"
    single = "single"


def parse_options(pairs: list[str]) -> dict:
    """``["reasoning_effort=high", "thinking_budget_tokens=8000"]`` -> typed dict (YAML scalars)."""
    import yaml

    options = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise UserError(f"--model-option takes KEY=VALUE, got {pair!r}")
        options[key.strip()] = yaml.safe_load(value)
    return options


def build_model(spec: str, options: dict):
    from agent.providers import InvalidModelSpec, MissingApiKey, make_model

    try:
        return make_model(spec, **options)
    except (InvalidModelSpec, MissingApiKey) as error:
        raise UserError(str(error)) from None
    except Exception as error:  # noqa: BLE001 - e.g. a missing script file: one line, not a traceback
        raise UserError(f"cannot create model {spec!r}: {error}") from None


def step_line(record: dict, steps: int) -> str:
    speed = f"{record['speedup']:.2f}x" if record.get("speedup") is not None else "-"
    cost = f"${record['cost_usd']:.3f}" if record.get("cost_usd") is not None else "$?"
    status = record["status"]
    from agent.render import STATUS_COLORS

    style = STATUS_COLORS.get(status, "yellow")
    return (f"step {record['step']:>2}/{steps}  [{style}]{status:<14}[/]  {speed:>8}  {record['tokens'] / 1000:>7.1f}k tok  {cost:>8}  "
            f"{record['wall_s']:>6.1f} s  {record.get('message', '')[:90]}")


@app.command("run")
def run_command(
    problem_name: str = typer.Argument(..., metavar="PROBLEM", help=PROBLEM_HELP),
    model: str = typer.Option(..., "--model", "-m", help="provider:model (openai:, anthropic:, together:, vllm:, ..., scripted:demo)"),
    model_option: list[str] = typer.Option([], "--model-option", "-o", help="provider option KEY=VALUE (e.g. reasoning_effort=high)"),
    mode: Mode = typer.Option(Mode.loop, help="loop: revise with feedback; single: one answer"),
    steps: int = typer.Option(10, min=1, help="model calls in loop mode"),
    world: int = typer.Option(2, "--world", "-w"),
    device: Device = typer.Option(Device.cpu, "--device", "-d"),
    size: Optional[str] = typer.Option(None, help="named problem size"),
    trials: int = typer.Option(5, min=1, max=100),
    allow_nccl: bool = typer.Option(False, help="allow torch.distributed collectives in solutions"),
    sandbox: str = typer.Option("local", help="local or docker"),
    out: Path = typer.Option(Path("runs"), help="runs are written under this folder"),
    target_speedup: Optional[float] = typer.Option(None, help="stop once a correct solution is this much faster"),
    max_tokens: Optional[int] = typer.Option(None, help="token budget for the run"),
    max_cost: Optional[float] = typer.Option(None, help="cost budget in USD"),
    max_wall: Optional[float] = typer.Option(None, help="wall-time budget in seconds"),
    examples: bool = typer.Option(True, help="show oracle solutions of other problems as in-context examples"),
    cheat_sheet: bool = typer.Option(True, help="include the multi-GPU cheat sheet in the task prompt (--no-cheat-sheet: zero-shot)"),
    gpus: Optional[str] = typer.Option(None, help="GPUs the run may use, e.g. 0,1,2,3"),
    image: Optional[str] = typer.Option(None, help="sandbox image for --sandbox docker"),
    pkb_root: Optional[Path] = typer.Option(None, "--pkb-root", help=PKB_ROOT_HELP),
) -> None:
    """Let a model write a solution for PROBLEM, judged by the harness, revising on its feedback."""
    from agent.budget import Budget
    from agent.loop import Agent
    from agent.run_config import RunConfig
    from agent.sandbox_cli import sandbox_options
    from agent.session import EvaluationSession
    from agent.trajectory import Trajectory, new_run_folder
    from sandbox.backends import SandboxError

    problem = load_problem(problem_name, pkb_root)
    harness = harness_config(problem, world, device, size, trials, None, allow_nccl, True)
    check_world(problem, world, device)
    options = parse_options(model_option)
    llm = build_model(model, options)
    config = RunConfig(problem=problem_name, model=model, model_options=options, mode=mode.value, target_speedup=target_speedup,
                       budget=Budget(steps=1 if mode == Mode.single else steps, max_tokens=max_tokens, max_cost_usd=max_cost, max_wall_s=max_wall),
                       harness=harness,
                       sandbox=sandbox, out=out, examples=examples, cheat_sheet=cheat_sheet)
    box_options = sandbox_options(sandbox, device.value, world, gpus, image)
    if device == Device.cuda:
        ensure_topology()
    folder = new_run_folder(out, problem.name, model)
    trajectory = Trajectory(folder, info={"config": config.model_dump(mode="json")})
    trajectory.write_file("config.json", config.model_dump_json(indent=2))
    console.print(f"[bold]{problem_name}[/] with [bold]{model}[/], {config.mode} mode, world {world} on {device.value}; run folder {folder}")
    try:
        with EvaluationSession(sandbox, config.harness, **box_options) as session:
            agent = Agent(llm, problem, config, session.evaluate, trajectory,
                          on_step=lambda record: console.print(step_line(record, config.budget.steps), highlight=False))
            with console.status("working (model call, then evaluation)...", spinner="dots"):
                exit_status = agent.run()
    except SandboxError as error:
        raise UserError(str(error)) from None
    best = agent.best
    spend = agent.spend
    cost = f"${spend.known_cost_usd:.3f}" if spend.known_cost_usd is not None else "unknown (no price for this model)"
    console.print(f"\n[bold]{exit_status}[/]: {trajectory.messages[-1]['content']}")
    console.print(f"{spend.steps} model calls, {spend.input_tokens} input + {spend.output_tokens} output tokens, cost {cost}, "
                  f"{spend.wall_s:.0f} s")
    if best:
        console.print(f"best solution: {folder / 'best' / 'solution.py'}")
    console.print(f"trajectory: {trajectory.path}")
    raise typer.Exit(0 if best else 1)


@app.command("prompt")
def prompt_command(
    problem_name: str = typer.Argument(..., metavar="PROBLEM", help=PROBLEM_HELP),
    world: int = typer.Option(2, "--world", "-w"),
    device: Device = typer.Option(Device.cuda, "--device", "-d"),
    size: Optional[str] = typer.Option(None),
    steps: int = typer.Option(10, min=1),
    allow_nccl: bool = typer.Option(False),
    examples: bool = typer.Option(True, help="show oracle solutions of other problems as in-context examples"),
    cheat_sheet: bool = typer.Option(True, help="include the multi-GPU cheat sheet"),
    pkb_root: Optional[Path] = typer.Option(None, "--pkb-root", help=PKB_ROOT_HELP),
) -> None:
    """Print the first prompt (system + task) a model would get, without calling any model."""
    from agent.prompting import system_prompt, task_options, task_prompt

    problem = load_problem(problem_name, pkb_root)
    config = harness_config(problem, world, device, size, 5, None, allow_nccl, True)
    check_world_size(problem, world)  # not check_world: printing a prompt needs no GPU
    print("=== system ===")
    print(system_prompt())
    print("=== user ===")
    print(task_prompt(problem, config, steps, **task_options(problem, cheat_sheet, examples)))


def ensure_topology() -> None:
    """Measure this host once (cached) before a GPU run, so its prompt and rooflines use measured rates."""
    from sandbox.topology_measure import TopologyUnavailable, cached_measurement, measure_host

    if cached_measurement() is not None:
        return
    try:
        with console.status("measuring this host's GPUs and links once (cached for later runs)...", spinner="dots"):
            measure_host()
    except TopologyUnavailable as error:
        errors.print(f"[yellow]note:[/] {error}; using datasheet rates", highlight=False)


@app.command("topology")
def topology_command(
    refresh: bool = typer.Option(False, "--refresh", help="measure again even if this host is cached"),
    as_json: bool = typer.Option(False, "--json", help="print the measurement as JSON"),
) -> None:
    """This host's GPUs, links and measured copy bandwidths (measured once in a subprocess, then cached)."""
    from sandbox.topology_measure import TopologyUnavailable, cache_path, measure_host

    try:
        if as_json:
            measurement, _ = measure_host(refresh=refresh)
        else:
            with console.status("measuring GPUs and links (a subprocess; tens of seconds)...", spinner="dots"):
                measurement, fresh = measure_host(refresh=refresh)
    except TopologyUnavailable as error:
        errors.print(f"[bold]no measured topology:[/] {error}", highlight=False, soft_wrap=True)
        raise typer.Exit(1) from None
    if as_json:
        print(measurement.model_dump_json(indent=2))
        return
    from agent.render import print_topology
    from sandbox.runtime.build import default_cache_root

    print_topology(measurement, console)
    where = cache_path(default_cache_root(), measurement.key)
    console.print(f"{'measured now' if fresh else 'from the cache'}: {where} (--refresh measures again)", highlight=False)


def lint_command(problems: list, world: Optional[int], as_json: bool) -> None:
    from sandbox.problem_lint import lint_problem

    if world is not None:
        unsupported = [p.name for p in problems if world not in p.spec.world_sizes]
        if unsupported:
            raise UserError(f"world {world} is not declared by {', '.join(unsupported)}; leave out --world to check every declared size")
    jobs = [(p, w) for p in problems for w in ((world,) if world is not None else p.spec.world_sizes)]
    results = []
    for number, (problem, job_world) in enumerate(jobs, start=1):
        with console.status(f"[{number}/{len(jobs)}] {problem.name}, world {job_world}", spinner="dots") if not as_json else nullcontext():
            results.append(lint_problem(problem, job_world))
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


def _add_subcommands() -> None:
    from agent.sandbox_cli import app as sandbox_app

    app.add_typer(sandbox_app, name="sandbox")


_add_subcommands()


def configure_logging() -> None:
    """Library events go to stderr, warnings and errors only (runs keep their full log in events.jsonl)."""
    import logging

    import structlog

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING),
                        logger_factory=structlog.PrintLoggerFactory(sys.stderr))


def main() -> None:
    configure_logging()
    try:
        app()
    except UserError as error:
        errors.print(f"[bold red]error:[/] {error}", highlight=False, soft_wrap=True)  # one line, however long
        sys.exit(2)
    except KeyboardInterrupt:
        errors.print("interrupted")
        sys.exit(130)


