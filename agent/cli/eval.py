"""``kloop eval``: judge one solution file."""

from __future__ import annotations

from contextlib import nullcontext
from pathlib import Path
from typing import Annotated

import typer

from agent.cli.common import (EVALUATION, AllowNccl, Device, DeviceOption, PkbRoot, ProblemName, Server, Size, TimingPrecision, Trials, World, console,
                              load_problem, read_text, sandbox_errors, sandbox_options)
from agent.run_config import SandboxSettings


@sandbox_options
def command(
    problem_name: ProblemName,
    solution: Annotated[Path, typer.Argument(metavar="SOLUTION", show_default=False, help="Python file defining solution(*inputs)")],
    world: World = 2,
    device: DeviceOption = Device.cpu,
    size: Size = None,
    trials: Trials = 5,
    stress: Annotated[int, typer.Option(min=0, help="also make this many back-to-back calls and check every output",
                                        rich_help_panel=EVALUATION)] = 0,
    timed: Annotated[bool | None, typer.Option("--timed/--no-timed", help="time reference and candidate (default: yes, except emulate)",
                                                  rich_help_panel=EVALUATION)] = None,
    timing_precision: TimingPrecision = None,
    allow_nccl: AllowNccl = False,
    profile_cache: Annotated[bool, typer.Option(help="reuse profiles taken before of this solution and the reference", rich_help_panel=EVALUATION)] = True,
    as_json: Annotated[bool, typer.Option("--json", help="print the EvalReport as JSON")] = False,
    pkb_root: PkbRoot = None,
    server: Server = None,
    *,
    sandbox: SandboxSettings,
) -> None:
    """Judge SOLUTION on PROBLEM: correct on every rank? how fast against the PyTorch + NCCL reference?"""
    if server:
        from agent.cli.remote import remote_eval, server_decides

        server_decides(sandbox, pkb_root, profile_cache=profile_cache)
        remote_eval(server, {"problem": problem_name, "source": read_text(solution), "world": world, "device": device.value,
                             "size": size, "allow_nccl": allow_nccl, "trials": trials, "timed": timed, "stress": stress,
                             "timing_precision": timing_precision},
                    solution.name, as_json)
    from agent.run_config import check_host_gpus, harness_config
    from agent.session import EvaluationSession

    problem = load_problem(problem_name, pkb_root)
    config = harness_config(problem, world=world, device=device.value, size=size, trials=trials, timed=timed, allow_nccl=allow_nccl,
                            profile_cache=profile_cache, stress_calls=stress, timing_precision=timing_precision)
    check_host_gpus(config)
    source = read_text(solution)
    working = console.status(f"evaluating {solution.name} on {problem_name} (world {world}, {device.value})", spinner="dots")
    with sandbox_errors(), EvaluationSession(config, sandbox) as session, nullcontext() if as_json else working:
        report = session.evaluate(source, filename=solution.name if solution.suffix == ".py" else "solution.py")
    if as_json:
        print(report.model_dump_json(indent=2))
    else:
        from agent.render import print_report

        print_report(report, console)
    raise typer.Exit(0 if report.correct else 1)
