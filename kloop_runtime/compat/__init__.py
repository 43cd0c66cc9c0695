"""The runtime under its public name, ``sandbox.runtime``.

Candidates write ``from sandbox import runtime``. In the project that name is
``sandbox/runtime.py``; in a candidate's rank, where nothing of the judge may be importable,
the folder :data:`ROOT` goes first on ``sys.path``: it holds a ``sandbox`` package whose only
content is ``runtime``. Both make the name through :func:`alias`.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent


class _SubmoduleAlias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports ``<name>.X`` as the module ``kloop_runtime.X`` itself (not a second copy of its file)."""

    def __init__(self, name: str):
        self.prefix = name + "."

    def find_spec(self, fullname, path=None, target=None):
        return importlib.util.spec_from_loader(fullname, self) if fullname.startswith(self.prefix) else None

    def create_module(self, spec):
        return importlib.import_module("kloop_runtime." + spec.name.removeprefix(self.prefix))

    def exec_module(self, module) -> None:
        pass


def alias(name: str) -> ModuleType:
    """Make the module ``name`` (and every ``name.X``) the same module object as ``kloop_runtime``
    (and ``kloop_runtime.X``); returns it."""
    import kloop_runtime

    sys.modules[name] = kloop_runtime
    if not any(isinstance(finder, _SubmoduleAlias) and finder.prefix == name + "." for finder in sys.meta_path):
        sys.meta_path.insert(0, _SubmoduleAlias(name))
    return kloop_runtime
