"""``kloop prompt``: what a model would be sent first, without calling one."""

from __future__ import annotations

from typing import Annotated

import typer

from agent.cli.common import AllowNccl, CheatSheet, Device, DeviceOption, Examples, PkbRoot, ProblemName, Size, World, load_problem


def command(
    problem_name: ProblemName,
    world: World = 2,
    device: DeviceOption = Device.cpu,
    size: Size = None,
    steps: Annotated[int, typer.Option(min=1, help="the step budget the prompt states")] = 10,
    allow_nccl: AllowNccl = False,
    examples: Examples = True,
    cheat_sheet: CheatSheet = True,
    pkb_root: PkbRoot = None,
) -> None:
    """Print the first prompt (system + task) a model would get, without calling any model (the defaults are `kloop run`'s)."""
    from agent.prompting import system_prompt, task_options, task_prompt
    from agent.run_config import harness_config

    problem = load_problem(problem_name, pkb_root)
    config = harness_config(problem, world=world, device=device.value, size=size, allow_nccl=allow_nccl)  # no GPU needed to print it
    print("=== system ===")
    print(system_prompt())
    print("=== user ===")
    print(task_prompt(problem, config, steps, **task_options(problem, cheat_sheet, examples, device.value)))
