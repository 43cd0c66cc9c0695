"""Every prompt string, as Jinja2 templates (StrictUndefined: a missing variable is an error,
never an empty string in front of a model).

Lists the code enforces are not written out again here: every template sees them as globals
taken from the code itself (:func:`enforced_lists`), so a rule changed in code changes the prompt.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import jinja2

TEMPLATES = Path(__file__).resolve().parent


def _scaled(value: float, unit: str, prefixes: str = " KMGTP") -> str:
    """3 significant digits with an SI prefix, never an exponent: 117 MB, 3.6 GB, 512 B."""
    for prefix in prefixes:
        if abs(value) < 1000 or prefix == prefixes[-1]:
            return f"{value:.3g} {prefix.strip()}{unit}"
        value /= 1000
    raise AssertionError("unreachable")


def enforced_lists() -> dict[str, object]:
    """What the judge enforces, for the templates: ``nvcc_options`` (the allowed option prefixes),
    ``forbidden_imports`` (why -> the modules refused for it) and ``forbidden_builtins``."""
    from kloop_runtime.build import NVCC_OPTIONS_ALLOWED
    from sandbox.harness.static_checks import FORBIDDEN_BUILTINS, FORBIDDEN_MODULES

    by_reason: dict[str, list[str]] = {}
    for module, why in FORBIDDEN_MODULES.items():
        by_reason.setdefault(why, []).append(module)
    return {"nvcc_options": NVCC_OPTIONS_ALLOWED, "forbidden_imports": by_reason, "forbidden_builtins": sorted(FORBIDDEN_BUILTINS)}


@cache
def _environment() -> jinja2.Environment:
    environment = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES)), undefined=jinja2.StrictUndefined,
        trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=False, autoescape=False,
    )
    environment.filters["bytes"] = lambda value: _scaled(float(value), "B")
    environment.filters["flop"] = lambda value: _scaled(float(value), "FLOP")
    environment.filters["code"] = lambda values: ", ".join(f"`{value}`" for value in values)
    environment.globals.update(enforced_lists())
    return environment


def render(name: str, **context) -> str:
    """Render ``prompts/<name>.j2`` with ``context``."""
    return _environment().get_template(f"{name}.j2").render(**context).strip() + "\n"
