"""``kloop run``: a model writes a solution, the harness judges it, the model revises."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from agent.bash.config import BashSettings
from agent.budget import Budget
from agent.cli.common import (AllowNccl, CheatSheet, Device, DeviceOption, Examples, PkbRoot, ProblemName, Server, Size, TimingPrecision, Trials, World, choices,
                              console, errors, load_problem, options_from, sandbox_errors, sandbox_options)
from agent.errors import UserError
from agent.run_config import RunMode, SandboxSettings

Mode = choices("Mode", RunMode)
BUDGET = "Budget"


@options_from("budget", Budget, BUDGET, {"max_run_cost_usd": "--max-run-cost", "max_run_wall_s": "--max-run-wall"})
@options_from("bash", BashSettings, "Bash mode", {"command_timeout_s": "--command-timeout", "output_limit_chars": "--output-limit"})
@sandbox_options
def command(
    problem_name: ProblemName,
    model: Annotated[str, typer.Option("--model", "-m", show_default=False,
                                       help="provider:model (openai:, anthropic:, together:, vllm:, ..., scripted:demo)")],
    model_option: Annotated[list[str], typer.Option("--model-option", "-o", help="provider option KEY=VALUE (e.g. reasoning_effort=high, "
                                                                                 "api=responses, stream=true)")] = [],
    max_output_tokens: Annotated[int | None, typer.Option(min=1, help="cap on the output tokens of each model call (the model "
                                                                       "option max_output_tokens; the run's budget is --max-run-tokens)")] = None,
    mode: Annotated[Mode, typer.Option(help="loop: revise with feedback; single: one answer; bash: work at a shell in the sandbox "
                                            "(check, bench, profile, submit)")] = Mode.loop,  # type: ignore[valid-type]
    out: Annotated[Path, typer.Option(help="runs are written under this folder")] = Path("runs"),
    world: World = 2,
    device: DeviceOption = Device.cpu,
    size: Size = None,
    trials: Trials = 5,
    timing_precision: TimingPrecision = None,
    allow_nccl: AllowNccl = False,
    target_speedup: Annotated[float | None, typer.Option(help="stop once a correct solution is this much faster",
                                                            rich_help_panel=BUDGET)] = None,
    examples: Examples = True,
    cheat_sheet: CheatSheet = True,
    pkb_root: PkbRoot = None,
    server: Server = None,
    *,
    budget: Budget,
    bash: BashSettings,
    sandbox: SandboxSettings,
) -> None:
    """Let a model write a solution for PROBLEM, judged by the harness, revising on its feedback."""
    if target_speedup is not None and target_speedup <= 0:
        raise UserError(f"--target-speedup: a speedup is above 0, got {target_speedup:g}")
    options = parse_model_options(model_option)
    if max_output_tokens is not None:
        options["max_output_tokens"] = max_output_tokens
    if server:
        from agent.cli.remote import remote_run, server_decides

        server_decides(sandbox, pkb_root, out=out)
        remote_run(server, {"problem": problem_name, "model": model, "options": options, "mode": mode.value,
                            "steps": budget.steps, "budgets": budget.model_dump(exclude={"steps"}), "target_speedup": target_speedup,
                            "world": world, "device": device.value, "size": size, "trials": trials, "allow_nccl": allow_nccl,
                            "timing_precision": timing_precision, "examples": examples, "cheat_sheet": cheat_sheet})
    from agent.episode import Episode
    from agent.render import spend_line, step_line
    from agent.run_config import RunConfig, check_host_gpus, harness_config
    from agent.session import EvaluationSession

    problem = load_problem(problem_name, pkb_root)
    harness = harness_config(problem, world=world, device=device.value, size=size, trials=trials, allow_nccl=allow_nccl,
                             timing_precision=timing_precision)
    check_host_gpus(harness)
    if model.strip() == "baseline:reference" and not allow_nccl:
        raise UserError("baseline:reference answers with the reference itself, which calls NCCL: add --allow-nccl")
    llm = build_model(model, options, problem)
    config = RunConfig(problem=problem_name, model=model, model_options=options, mode=mode.value, target_speedup=target_speedup,
                       budget=budget, harness=harness, sandbox=sandbox, out=out, pkb_root=pkb_root, examples=examples,
                       cheat_sheet=cheat_sheet, bash=bash)
    if config.mode == "bash":
        run_bash(llm, problem, config)
    with sandbox_errors():
        EvaluationSession(harness, sandbox).box.close()  # the sandbox settings are checked now, before a run folder exists
    if harness.device == "cuda":
        ensure_topology()
    status = console.status("working (model call, then evaluation)...", spinner="dots")

    def progress(info: dict) -> None:
        status.update(f"model answering: {info['thinking_chars']} chars of thinking, {info['text_chars']} of answer, "
                      f"{info['elapsed_s']:.0f} s")

    def on_step(record: dict) -> None:
        console.print(step_line(record, config.budget.steps), highlight=False)
        status.update("working (model call, then evaluation)...")

    episode = Episode(config, model=llm, on_step=on_step, on_progress=progress)
    try:
        console.print(f"[bold]{problem_name}[/] with [bold]{model}[/], {config.mode} mode, world {world} on {device.value}; "
                      f"run folder {episode.folder}")
        with sandbox_errors(), status:
            result = episode.run()
    except KeyboardInterrupt as interrupt:
        episode.abort(interrupt)
        errors.print(f"interrupted; trajectory: {episode.trajectory_path}", highlight=False, soft_wrap=True)
        raise typer.Exit(130) from None
    except UserError as error:
        raise UserError(f"{error} (trajectory: {episode.trajectory_path})") from None
    except Exception as error:
        errors.print(f"[bold red]error:[/] uncaught {type(error).__name__}: {error}; the trajectory records it with its traceback: "
                     f"{episode.trajectory_path}", highlight=False, soft_wrap=True)
        raise typer.Exit(1) from None
    console.print(f"\n[bold]{result.exit_status}[/]: {result.message.removeprefix(result.exit_status + ': ')}", highlight=False)
    console.print(spend_line(result.steps, result.input_tokens, result.output_tokens, result.cost_usd, result.wall_s))
    for warning in result.warnings:
        errors.print(f"[yellow]warning:[/] {warning}", highlight=False, soft_wrap=True)
    if result.best_solution_path:
        console.print(f"best solution: {result.best_solution_path}")
    console.print(f"trajectory: {result.trajectory_path}")
    raise typer.Exit(0 if result.correct else 1)


def parse_model_options(pairs: list[str]) -> dict:
    """``["reasoning_effort=high", "thinking_budget_tokens=8000"]`` -> typed dict (YAML scalars)."""
    import yaml

    options = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise UserError(f"--model-option takes KEY=VALUE, got {pair!r}")
        options[key.strip()] = yaml.safe_load(value)
    return options


def build_model(spec: str, options: dict, problem=None):
    from agent.providers import InvalidModelSpec, MissingApiKey, make_model

    try:
        return make_model(spec, problem=problem, **options)
    except (InvalidModelSpec, MissingApiKey) as error:
        raise UserError(str(error)) from None
    except Exception as error:  # noqa: BLE001 - e.g. a missing script file: one line, not a traceback
        raise UserError(f"cannot create model {spec!r}: {error}") from None


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


def run_bash(llm, problem, config) -> None:
    """``--mode bash``: the model works at a shell in the sandbox; its submission is judged at the end."""
    from agent.bash.episode import make_agent
    from agent.render import spend_line, step_line
    from agent.trajectory import start_run

    if config.harness.device == "cuda":
        ensure_topology()
    trajectory = start_run(config, problem.name)
    console.print(f"[bold]{config.problem}[/] with [bold]{config.model}[/], bash mode, world {config.harness.world} on "
                  f"{config.harness.device}; run folder {trajectory.folder}")
    with sandbox_errors():
        agent = make_agent(llm, problem, config, trajectory,
                           on_step=lambda record: console.print(step_line(record, config.budget.steps), highlight=False))
        with console.status("working (model call, then the command)...", spinner="dots"):
            exit_status = agent.run()
    spend = agent.spend
    console.print(f"\n[bold]{exit_status}[/]: {agent.messages[-1].content}")
    console.print(spend_line(spend.steps, spend.input_tokens, spend.output_tokens, spend.known_cost_usd, spend.wall_s))
    if agent.verdict is not None:
        from agent.render import print_report

        print_report(agent.verdict, console)
    console.print(f"trajectory: {trajectory.path}")
    raise typer.Exit(0 if agent.verdict is not None and agent.verdict.correct else 1)
