"""Pulling the candidate module out of a model's answer."""

from __future__ import annotations

import ast
import re

from agent.control import FormatError, Truncated
from prompts import render

FENCE = re.compile(r"^[ \t]*```[ \t]*([A-Za-z0-9_+.-]*)[^\n]*\n(.*?)^[ \t]*```[ \t]*$", re.S | re.M)
PYTHON_TAGS = {"python", "py", "python3", ""}


def _defines_solution(source: str) -> bool:
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return False
    return any(isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == "solution" for node in tree.body)


def extract_solution(text: str, truncated: bool = False, tool_calls: list[str] | None = None, refusal: str | None = None) -> str:
    """The last fenced Python block that parses and defines a top-level ``solution``.

    Raises :class:`Truncated` when the answer was cut off and holds no complete block, and
    :class:`FormatError` (with feedback for the model) when there is no usable block; that
    feedback names the ``tool_calls`` the answer made instead, or the ``refusal`` it gave."""
    blocks = FENCE.findall(text)
    python_blocks = [body for tag, body in blocks if tag.lower() in PYTHON_TAGS]
    for body in reversed(python_blocks):
        if _defines_solution(body):
            return body.strip("\n") + "\n"
    if truncated:
        raise Truncated(render("truncated"))
    syntax_error = None
    if python_blocks:
        try:
            ast.parse(python_blocks[-1])
        except SyntaxError as error:
            syntax_error = f"line {error.lineno}: {error.msg}"
    raise FormatError(render("format_error", blocks=len(blocks), syntax_error=syntax_error, tool_calls=tool_calls or [],
                             refusal=refusal))
