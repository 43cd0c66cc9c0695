"""Tables the benchmark scripts print (standard library only: importable before torch)."""

from __future__ import annotations


SPREAD_HEADER = ["median_ms", "min_ms", "max_ms", "iqr_ms"]


def spread(values_ms: list[float]) -> list[float]:
    """Median, least, most and interquartile range of some timings (SPREAD_HEADER's columns)."""
    import statistics

    quartiles = statistics.quantiles(values_ms, n=4) if len(values_ms) > 1 else [values_ms[0]] * 3
    return [statistics.median(values_ms), min(values_ms), max(values_ms), quartiles[2] - quartiles[0]]


def print_table(title: str, header: list[str], rows: list[list]) -> None:
    text = [[("-" if cell is None else f"{cell:.4g}" if isinstance(cell, float) else str(cell)) for cell in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in text)) if text else len(h) for i, h in enumerate(header)]
    print(title)
    print(" | ".join(h.rjust(w) for h, w in zip(header, widths)))
    print("-+-".join("-" * w for w in widths))
    for row in text:
        print(" | ".join(cell.rjust(w) for cell, w in zip(row, widths)), flush=True)
