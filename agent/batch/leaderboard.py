"""The terminal leaderboard: one row per model, intervals beside every score, infrastructure
failures beside the scores they were kept out of, ties marked instead of ranked."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table


def fmt_metric(metric: dict[str, Any] | None, percent: bool = True, suffix: str = "") -> str:
    if not metric or metric.get("value") is None:
        return "-"
    value, ci = metric["value"], metric.get("ci")
    if percent:
        text = f"{100 * value:.0f}%"
        return text + (f"\n[dim]{100 * ci[0]:.0f}-{100 * ci[1]:.0f}[/]" if ci else "")
    text = f"{value:.2f}{suffix}"
    return text + (f"\n[dim]{ci[0]:.2f}-{ci[1]:.2f}[/]" if ci else "")


def money(spend: dict[str, Any]) -> str:
    text = f"${spend['cost_usd']:.2f}"
    return text + (f" +{spend['episodes_without_price']} unpriced" if spend["episodes_without_price"] else "")


def leaderboard_table(summary: dict[str, Any], title: str = "leaderboard") -> Table:
    models = summary["models"]
    table = Table(title=f"{title} (95% bootstrap intervals below each score; '=' marks ranks whose intervals overlap; "
                        f"fast_1 sure: the speedup's own interval above 1)", title_justify="left")
    for column in ("rank", "model", "correct", "pass@1", "fast_1", "fast_1 sure", "fast_2", "geomean speedup", "infra",
                   "skipped", "spend"):
        table.add_column(column, justify="left" if column == "model" else "right", overflow="fold")
    for row in summary["leaderboard"]:
        m = models[row["model"]]
        rank = f"{row['rank']}{'=' if row['tied_with'] else ''}"
        infra = str(m["infra_failures"]) + (f" ({m['infra_retries']} retried)" if m["infra_retries"] else "")
        table.add_section() if len(table.rows) else None
        table.add_row(rank, row["model"], f"{m['correct']}/{m['scored']}", fmt_metric(m["pass_at_k"].get("1")),
                      fmt_metric(m["fast_p"]["1"]), fmt_metric(m["fast_p_sure"]["1"]), fmt_metric(m["fast_p"]["2"]),
                      fmt_metric(m["geomean_speedup"], percent=False, suffix="x"), infra, str(m["skipped"]),
                      money(m["spend"]))
    return table


def pass_at_k_table(summary: dict[str, Any]) -> Table | None:
    models = summary["models"]
    ks = sorted({int(k) for m in models.values() for k in m["pass_at_k"]})
    if max(ks, default=1) < 2:
        return None
    table = Table(title="pass@k and fast_1@k (unbiased estimator)", title_justify="left")
    table.add_column("model")
    for k in ks:
        table.add_column(f"pass@{k}", justify="right")
    for k in ks:
        table.add_column(f"fast_1@{k}", justify="right")
    for label, m in models.items():
        table.add_row(label, *[fmt_metric(m["pass_at_k"].get(str(k))) for k in ks], *[fmt_metric(m["fast_1_at_k"].get(str(k))) for k in ks])
    return table


def problems_table(summary: dict[str, Any]) -> Table:
    table = Table(title="per problem: best correct speedup (timing interval); ties are models the leader cannot be told from",
                  title_justify="left")
    labels = list(summary["models"])
    table.add_column("problem")
    for label in labels:
        table.add_column(label, justify="right")
    table.add_column("leader")
    for problem, entry in summary["problems"].items():
        cells = []
        for label in labels:
            cell = entry["models"].get(label)
            if cell is None or not cell["samples"]:
                cells.append("[dim]n/a[/]")
            elif cell["best_speedup"] is None:
                cells.append(f"{cell['correct']}/{cell['samples']} ok" if cell["correct"] else f"[red]0/{cell['samples']}[/]")
            else:
                low, high = cell["best_speedup_ci"]
                cells.append(f"{cell['best_speedup']:.2f}x\n[dim]{low:.2f}-{high:.2f}[/]")
        leader = entry.get("leader", "-")
        if entry.get("tied_with_leader"):
            leader += " [yellow]tied with " + ", ".join(entry["tied_with_leader"]) + "[/]"
        table.add_row(problem, *cells, leader)
    return table


def print_summary(summary: dict[str, Any], console: Console, problems: bool = True) -> None:
    console.print(leaderboard_table(summary))
    extra = pass_at_k_table(summary)
    if extra is not None:
        console.print(extra)
    if problems and summary["problems"]:
        console.print(problems_table(summary))
    infra = {label: m["infra_by_class"] for label, m in summary["models"].items() if m["infra_failures"]}
    if infra:
        console.print("infrastructure failures (kept out of the scores): " +
                      "; ".join(f"{label}: " + ", ".join(f"{n} {c}" for c, n in classes.items()) for label, classes in infra.items()))
