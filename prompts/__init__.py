"""Every prompt string, as Jinja2 templates (StrictUndefined: a missing variable is an error,
never an empty string in front of a model)."""

from __future__ import annotations

from functools import cache
from pathlib import Path

import jinja2

TEMPLATES = Path(__file__).resolve().parent


@cache
def _environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES)), undefined=jinja2.StrictUndefined,
        trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=False, autoescape=False,
    )


def render(name: str, **context) -> str:
    """Render ``prompts/<name>.j2`` with ``context``."""
    return _environment().get_template(f"{name}.j2").render(**context).strip() + "\n"
