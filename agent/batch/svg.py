"""Plots as inline SVG strings (no library, no script, nothing fetched): line charts, a heat map
and a scatter plot, sized for a report page."""

from __future__ import annotations

from html import escape

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22")
W, H = 560, 320
LEFT, RIGHT, TOP, BOTTOM = 56, 170, 24, 44


def color(index: int) -> str:
    return PALETTE[index % len(PALETTE)]


def _frame(title: str, x_label: str, y_label: str, body: list[str], width: int = W, height: int = H) -> str:
    return (f'<svg xmlns="http://www.w3.org/2000/svg" class="plot" role="img" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}"><title>{escape(title)}</title>'
            f'<text x="{LEFT}" y="15" class="plot-title">{escape(title)}</text>'
            f'<text x="{LEFT + (width - LEFT - RIGHT) / 2:.0f}" y="{height - 6}" text-anchor="middle" class="axis-label">{escape(x_label)}</text>'
            f'<text transform="translate(14 {TOP + (height - TOP - BOTTOM) / 2:.0f}) rotate(-90)" text-anchor="middle" '
            f'class="axis-label">{escape(y_label)}</text>' + "".join(body) + "</svg>")


def _ticks(low: float, high: float, count: int = 5, integer: bool = False) -> list[float]:
    if integer:
        step = max(1, round((high - low) / count))
        return [float(v) for v in range(int(low), int(high) + 1, step)]
    return [low + (high - low) * i / count for i in range(count + 1)]


def _axes(x_range: tuple[float, float], y_range: tuple[float, float], x_fmt: str, y_fmt: str) -> tuple[list[str], callable, callable]:
    plot_w, plot_h = W - LEFT - RIGHT, H - TOP - BOTTOM
    (x0, x1), (y0, y1) = x_range, y_range
    integer = x_fmt == ".0f"
    if integer:
        x0, x1 = x0 - 0.25, x1 + 0.25  # a little room at either end of whole-number axes (steps)
    x1 = x1 if x1 > x0 else x0 + 1
    y1 = y1 if y1 > y0 else y0 + 1

    def sx(x: float) -> float:
        return LEFT + (x - x0) / (x1 - x0) * plot_w

    def sy(y: float) -> float:
        return TOP + plot_h - (y - y0) / (y1 - y0) * plot_h

    parts = [f'<rect x="{LEFT}" y="{TOP}" width="{plot_w}" height="{plot_h}" class="plot-area"/>']
    for y in _ticks(y0, y1):
        parts.append(f'<line x1="{LEFT}" x2="{LEFT + plot_w}" y1="{sy(y):.1f}" y2="{sy(y):.1f}" class="grid"/>'
                     f'<text x="{LEFT - 6}" y="{sy(y) + 4:.1f}" text-anchor="end" class="tick">{format(y, y_fmt)}</text>')
    for x in _ticks(x0 + 0.25, x1 - 0.25, integer=True) if integer else _ticks(x0, x1):
        parts.append(f'<text x="{sx(x):.1f}" y="{TOP + plot_h + 16}" text-anchor="middle" class="tick">{format(x, x_fmt)}</text>')
    return parts, sx, sy


def _legend(labels: list[str]) -> list[str]:
    parts = []
    for index, label in enumerate(labels):
        y = TOP + 8 + 18 * index
        parts.append(f'<rect x="{W - RIGHT + 12}" y="{y - 8}" width="12" height="12" fill="{color(index)}"/>'
                     f'<text x="{W - RIGHT + 30}" y="{y + 2}" class="legend">{escape(label[:26])}</text>')
    return parts


def line_chart(title: str, series: dict[str, list[tuple[float, float]]], x_label: str, y_label: str,
               y_range: tuple[float, float] = (0.0, 1.0), x_fmt: str = ".1f", y_fmt: str = ".0%", markers: bool = False) -> str:
    xs = [x for values in series.values() for x, _ in values] or [0.0, 1.0]
    parts, sx, sy = _axes((min(xs), max(xs)), y_range, x_fmt, y_fmt)
    for index, (label, values) in enumerate(series.items()):
        if not values:
            continue
        path = " ".join(f"{'M' if i == 0 else 'L'}{sx(x):.1f},{sy(y):.1f}" for i, (x, y) in enumerate(values))
        parts.append(f'<path d="{path}" fill="none" stroke="{color(index)}" stroke-width="2" class="series"><title>{escape(label)}</title></path>')
        if markers:
            parts += [f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="3" fill="{color(index)}"><title>{escape(label)}: {format(y, y_fmt)} '
                      f'at {format(x, x_fmt)}</title></circle>' for x, y in values]
    return _frame(title, x_label, y_label, parts + _legend(list(series)))


def scatter(title: str, points: list[tuple[str, float, float]], x_label: str, y_label: str, x_fmt: str = ".3g",
            y_fmt: str = ".0%") -> str:
    xs = [x for _, x, _ in points] or [0.0]
    parts, sx, sy = _axes((0.0, max(max(xs) * 1.1, 0.01)), (0.0, 1.0), x_fmt, y_fmt)
    for index, (label, x, y) in enumerate(points):
        parts.append(f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="6" fill="{color(index)}" class="point">'
                     f'<title>{escape(label)}: {format(y, y_fmt)} for {format(x, x_fmt)}</title></circle>')
    return _frame(title, x_label, y_label, parts + _legend([label for label, _, _ in points]))


def heat_color(value: float) -> str:
    """White (0) to green (1)."""
    value = max(0.0, min(1.0, value))
    return f"rgb({int(255 - 211 * value)},{int(255 - 95 * value)},{int(255 - 211 * value)})"


def heatmap(title: str, rows: list[str], columns: list[str], values: dict[tuple[str, str], float | None], fmt: str = ".0%") -> str:
    cell_w, cell_h, left, top = 86, 26, 170, 40
    width, height = max(left + cell_w * max(len(columns), 1) + 20, 380), top + cell_h * max(len(rows), 1) + 20
    parts = [f'<text x="{left + cell_w * c + cell_w / 2:.0f}" y="{top - 8}" text-anchor="middle" class="tick">{escape(col[:12])}</text>'
             for c, col in enumerate(columns)]
    for r, row in enumerate(rows):
        parts.append(f'<text x="{left - 8}" y="{top + cell_h * r + 17}" text-anchor="end" class="legend">{escape(row[:24])}</text>')
        for c, col in enumerate(columns):
            value = values.get((row, col))
            fill = "#eeeeee" if value is None else heat_color(value)
            text = "n/a" if value is None else format(value, fmt)
            x, y = left + cell_w * c, top + cell_h * r
            parts.append(f'<rect x="{x}" y="{y}" width="{cell_w - 2}" height="{cell_h - 2}" fill="{fill}" class="cell">'
                         f'<title>{escape(row)} / {escape(col)}: {text}</title></rect>'
                         f'<text x="{x + cell_w / 2 - 1:.0f}" y="{y + 17}" text-anchor="middle" class="cell-text">{text}</text>')
    return (f'<svg xmlns="http://www.w3.org/2000/svg" class="plot" role="img" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}"><title>{escape(title)}</title>'
            f'<text x="{left}" y="15" class="plot-title">{escape(title)}</text>' + "".join(parts) + "</svg>")
