"""Intervals of a measured number (a speedup's or a score's 95% bootstrap interval, as [low, high])."""

from __future__ import annotations


def overlaps(a: list[float] | None, b: list[float] | None) -> bool:
    """Whether two intervals share a point: the numbers they bound cannot be told apart. An
    unknown interval (None) overlaps nothing."""
    return a is not None and b is not None and a[0] <= b[1] and b[0] <= a[1]
