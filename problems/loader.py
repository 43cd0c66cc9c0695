"""Loading a suite problem from its folder: ``problem.py`` imported under a private module name."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

from problems.contract import Problem


def load_module(path: Path, module_name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load_problem(folder: Path) -> Problem:
    module = load_module(folder / "problem.py", f"kloop_problem_{folder.name}")
    return Problem(spec=module.SPEC, folder=folder, make_inputs=module.make_inputs, cost=module.cost, ref=f"folder:{folder}")
