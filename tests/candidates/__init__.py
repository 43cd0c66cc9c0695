"""Candidate solutions used by the tests (each file is evaluated on its own, as a model's would be)."""

from pathlib import Path

HERE = Path(__file__).parent


def source(name: str) -> str:
    return (HERE / f"{name}.py").read_text()
