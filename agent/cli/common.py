"""What the commands share: the consoles, the options several commands take, a pydantic model's
fields as a panel of options, and turning the packages' errors into one-line UserErrors.

Import cheaply: no torch, no LLM SDK here (``kloop --help`` imports every command module).
"""

from __future__ import annotations

import enum
import functools
import inspect
import typing
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import BaseModel, ValidationError
from rich.console import Console

from agent.errors import UserError
from agent.run_config import SandboxSettings
from sandbox.harness.config import DEVICE_MODE_HELP, TIMING_PRECISION_HELP, DeviceMode

console = Console()
errors = Console(stderr=True)


def choices(name: str, literal: Any) -> type[enum.Enum]:
    """A typer choice (a str enum) made from a ``Literal`` defined elsewhere, the one definition."""
    return enum.Enum(name, {value: value for value in typing.get_args(literal)}, type=str)  # type: ignore[return-value]


Device = choices("Device", DeviceMode)

EVALUATION = "Evaluation"
PROMPT = "Prompt"

ProblemName = Annotated[str, typer.Argument(
    metavar="PROBLEM", show_default=False,
    help="problem name (see `kloop problems`), or pkb:<id or name> from a ParallelKernelBench checkout (--pkb-root)")]
PkbRoot = Annotated[Path | None, typer.Option(
    "--pkb-root", help="ParallelKernelBench checkout that pkb:<id> problems are loaded from (default: $KLOOP_PKB_ROOT)")]
World = Annotated[int, typer.Option("--world", "-w", min=1, max=64, help="number of ranks", rich_help_panel=EVALUATION)]
DeviceOption = Annotated[Device, typer.Option(  # type: ignore[valid-type]
    "--device", "-d", help=", ".join(f"{mode} ({what})" for mode, what in DEVICE_MODE_HELP.items()), rich_help_panel=EVALUATION)]
Size = Annotated[str | None, typer.Option(
    help="named problem size (default: `default` in cuda mode, `small` on cpu and in emulation)", rich_help_panel=EVALUATION)]
Trials = Annotated[int, typer.Option(min=1, max=100, help="correctness trials with fresh seeds", rich_help_panel=EVALUATION)]
TimingPrecision = Annotated[float | None, typer.Option(min=0.0, max=1.0, show_default=False, help=TIMING_PRECISION_HELP,
                                                      rich_help_panel=EVALUATION)]
AllowNccl = Annotated[bool, typer.Option(help="allow the solution to call torch.distributed collectives", rich_help_panel=EVALUATION)]
Examples = Annotated[bool, typer.Option(help="show oracle solutions of other problems as in-context examples", rich_help_panel=PROMPT)]
Server = Annotated[str | None, typer.Option(
    "--server", help="submit to a `kloop serve` at this URL and follow the job there (token: $KLOOP_TOKEN)", show_default=False)]
CheatSheet = Annotated[bool, typer.Option(help="include the multi-GPU cheat sheet in the task prompt (--no-cheat-sheet: zero-shot)",
                                          rich_help_panel=PROMPT)]



def options_from(parameter: str, model: type[BaseModel], panel: str, flags: dict[str, str] | None = None) -> Callable:
    """Decorate a command whose ``parameter`` is a ``model`` instance: each field of the model
    becomes an option (``--field-name``, or the name given in ``flags``) in the --help panel
    ``panel``, its help the field's description; the command gets one validated model (a value
    the model refuses is a UserError)."""
    flags = flags or {}

    def decorate(command: Callable) -> Callable:
        hints = typing.get_type_hints(command, include_extras=True)
        keys = {f"{parameter}__{name}": name for name in model.model_fields}
        added = []
        for key, name in keys.items():
            field = model.model_fields[name]
            flag = flags.get(name, "--" + name.replace("_", "-"))
            default = field.get_default(call_default_factory=True)
            option = typer.Option(flag, help=field.description, rich_help_panel=panel)
            hints[key] = Annotated[field.annotation, option]
            added.append(inspect.Parameter(key, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=hints[key]))
        del hints[parameter]
        parameters = [p.replace(annotation=hints[p.name]) for p in inspect.signature(command).parameters.values() if p.name != parameter]

        @functools.wraps(command)
        def wrapper(**kwargs: Any) -> Any:
            values = {name: kwargs.pop(key) for key, name in keys.items()}
            try:
                kwargs[parameter] = model(**values)
            except ValidationError as error:
                raise UserError("; ".join(f"{flags.get(str(e['loc'][0]), '--' + str(e['loc'][0]).replace('_', '-'))}: {e['msg']}"
                                          for e in error.errors())) from None
            return command(**kwargs)

        del wrapper.__wrapped__  # typer must see the signature below, not the command's
        wrapper.__signature__ = inspect.Signature([*parameters, *added])  # type: ignore[attr-defined]
        wrapper.__annotations__ = {p.name: p.annotation for p in (*parameters, *added)}
        return wrapper

    return decorate


def sandbox_options(command: Callable) -> Callable:
    """--sandbox, --gpus and --image, as one SandboxSettings parameter ``sandbox``."""
    return options_from("sandbox", SandboxSettings, "Sandbox", {"backend": "--sandbox"})(command)


def load_problem(name: str, pkb_root: Path | None = None):
    """The problem named on the command line (a suite name or pkb:<id>)."""
    from problems import UnknownProblem, find_problem

    try:
        return find_problem(name, pkb_root)
    except UnknownProblem as error:
        raise UserError(str(error)) from None


def read_text(path: Path) -> str:
    try:
        return path.read_text()
    except FileNotFoundError:
        raise UserError(f"no such file: {path}") from None
    except (OSError, UnicodeDecodeError) as error:
        raise UserError(f"cannot read {path}: {error}") from None


@contextmanager
def sandbox_errors() -> Iterator[None]:
    """A sandbox that cannot be made, started or given its GPUs is a UserError (one line)."""
    from sandbox.backends import SandboxError
    from sandbox.gpu_pool import GpuPoolError

    try:
        yield
    except (SandboxError, GpuPoolError) as error:
        raise UserError(str(error)) from None
