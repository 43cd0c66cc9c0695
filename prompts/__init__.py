"""Every prompt string, as Jinja2 templates (StrictUndefined: a missing variable is an error,
never an empty string in front of a model)."""

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


@cache
def _environment() -> jinja2.Environment:
    environment = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES)), undefined=jinja2.StrictUndefined,
        trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=False, autoescape=False,
    )
    environment.filters["bytes"] = lambda value: _scaled(float(value), "B")
    environment.filters["flop"] = lambda value: _scaled(float(value), "FLOP")
    return environment


def render(name: str, **context) -> str:
    """Render ``prompts/<name>.j2`` with ``context``."""
    return _environment().get_template(f"{name}.j2").render(**context).strip() + "\n"
