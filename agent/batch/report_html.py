"""``report.html``: one self-contained page (inline CSS, SVG and a few lines of script; nothing
fetched) with the leaderboard, fast_p against p, a per-category heat map, per-step curves, cost
against score, the per-problem comparison and every episode linked to its trajectory."""

from __future__ import annotations

import os
import time
from html import escape
from pathlib import Path
from typing import Any

from agent.batch import svg
from agent.batch.episodes import EpisodeResult
from agent.trajectory import find_trajectory

CSS = """
body{font-family:"DejaVu Sans",Helvetica,Arial,sans-serif;margin:24px;color:#222;max-width:1250px}
h1{font-size:22px;margin:0 0 4px} h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #ddd;padding-bottom:3px}
.note{color:#666;font-size:12px} table{border-collapse:collapse;font-size:12px;margin:6px 0}
th,td{border:1px solid #ddd;padding:3px 7px;text-align:right} th{background:#f4f4f4;cursor:pointer} td.l,th.l{text-align:left}
.ci{color:#888;font-size:11px} .tie{color:#b8860b} .correct{color:#1a7f37;font-weight:bold} .failed{color:#c62828}
.infra{color:#8e24aa} .skipped{color:#999} .plots{display:flex;flex-wrap:wrap;gap:18px}
.plot{background:#fff;border:1px solid #e3e3e3} .plot-title{font-size:13px;font-weight:bold} .tick{font-size:10px;fill:#555}
.axis-label{font-size:11px;fill:#333} .legend{font-size:11px} .grid{stroke:#eee} .plot-area{fill:#fcfcfc;stroke:#ccc}
.cell-text{font-size:11px} input{margin:4px 0;padding:3px;width:260px}
"""

SCRIPT = """
document.querySelectorAll("table.sortable th").forEach(function (th, index) {
  th.addEventListener("click", function () {
    var body = th.closest("table").tBodies[0];
    var rows = Array.prototype.slice.call(body.rows);
    var up = th.dataset.dir !== "up"; th.dataset.dir = up ? "up" : "down";
    rows.sort(function (a, b) {
      var x = a.cells[index].dataset.v || a.cells[index].textContent, y = b.cells[index].dataset.v || b.cells[index].textContent;
      var nx = parseFloat(x), ny = parseFloat(y);
      var c = (!isNaN(nx) && !isNaN(ny)) ? nx - ny : x.localeCompare(y);
      return up ? c : -c;
    });
    rows.forEach(function (row) { body.appendChild(row); });
  });
});
var filter = document.getElementById("episode-filter");
filter.addEventListener("input", function () {
  var needle = filter.value.toLowerCase();
  document.querySelectorAll("#episodes tbody tr").forEach(function (row) {
    row.style.display = row.textContent.toLowerCase().indexOf(needle) >= 0 ? "" : "none";
  });
});
"""


def _pct(metric: dict[str, Any] | None) -> str:
    if not metric or metric.get("value") is None:
        return "-"
    ci = metric.get("ci")
    band = f' <span class="ci">{100 * ci[0]:.0f}&ndash;{100 * ci[1]:.0f}</span>' if ci else ""
    return f"{100 * metric['value']:.0f}%{band}"


def _num(metric: dict[str, Any] | None, suffix: str = "x") -> str:
    if not metric or metric.get("value") is None:
        return "-"
    ci = metric.get("ci")
    band = f' <span class="ci">{ci[0]:.2f}&ndash;{ci[1]:.2f}</span>' if ci else ""
    return f"{metric['value']:.2f}{suffix}{band}"


def _v(metric: dict[str, Any] | None) -> str:
    return "" if not metric or metric.get("value") is None else f' data-v="{metric["value"]}"'


def leaderboard_html(summary: dict[str, Any]) -> str:
    rows = []
    for row in summary["leaderboard"]:
        m = summary["models"][row["model"]]
        tie = f' <span class="tie" title="intervals overlap with {escape(", ".join(row["tied_with"]))}">=</span>' if row["tied_with"] else ""
        cost = f"${m['spend']['cost_usd']:.2f}" + (f" +{m['spend']['episodes_without_price']} unpriced" if m["spend"]["episodes_without_price"] else "")
        retried = f" ({m['infra_retries']} retried)" if m["infra_retries"] else ""
        rows.append(f"<tr><td>{row['rank']}{tie}</td><td class=l>{escape(row['model'])}</td><td>{m['correct']}/{m['scored']}</td>"
                    f"<td{_v(m['pass_at_k'].get('1'))}>{_pct(m['pass_at_k'].get('1'))}</td>"
                    + "".join(f"<td{_v(m['fast_p'][p])}>{_pct(m['fast_p'][p])}</td>" for p in ("0", "1", "1.5", "2"))
                    + f"<td{_v(m['fast_p_sure']['1'])}>{_pct(m['fast_p_sure']['1'])}</td>"
                    + f"<td{_v(m['geomean_speedup'])}>{_num(m['geomean_speedup'])}</td><td>{m['infra_failures']}{retried}</td>"
                    f"<td>{m['skipped']}</td>"
                    f"<td>{cost}</td></tr>")
    head = "".join(f"<th{' class=l' if h == 'model' else ''}>{h}</th>" for h in
                   ("rank", "model", "correct", "pass@1", "fast_0", "fast_1", "fast_1.5", "fast_2", "fast_1 sure", "geomean speedup", "infra failures",
                    "skipped", "spend"))
    return f'<table class="sortable" id="leaderboard"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>'


def problems_html(summary: dict[str, Any]) -> str:
    labels = list(summary["models"])
    head = "<th class=l>problem</th><th class=l>category</th>" + "".join(f"<th>{escape(label)}</th>" for label in labels) + "<th class=l>leader</th>"
    rows = []
    for problem, entry in summary["problems"].items():
        cells = []
        for label in labels:
            cell = entry["models"].get(label)
            if not cell or not cell["samples"]:
                cells.append('<td class="skipped">n/a</td>')
            elif cell["best_speedup"] is None:
                cells.append(f'<td class="{"correct" if cell["correct"] else "failed"}">{cell["correct"]}/{cell["samples"]}</td>')
            else:
                low, high = cell["best_speedup_ci"]
                cells.append(f'<td data-v="{cell["best_speedup"]}">{cell["best_speedup"]:.2f}x <span class="ci">{low:.2f}&ndash;{high:.2f}</span></td>')
        leader = escape(entry.get("leader", "-"))
        if entry.get("tied_with_leader"):
            leader += f' <span class="tie">tied with {escape(", ".join(entry["tied_with_leader"]))} (intervals overlap)</span>'
        rows.append(f"<tr><td class=l>{escape(problem)}</td><td class=l>{escape(entry['category'])}</td>{''.join(cells)}<td class=l>{leader}</td></tr>")
    return f'<table class="sortable" id="problems"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>'


def episodes_html(results: list[tuple[Path, EpisodeResult]], html_dir: Path) -> str:
    rows = []
    for folder, r in sorted(results, key=lambda item: (item[1].model, item[1].problem, item[1].sample)):
        link = "-"
        trajectory = find_trajectory(folder / r.run_dir) if r.run_dir else None
        if trajectory is not None and trajectory.is_file():  # a link only to a file that is there
            best = trajectory.parent / "best" / "solution.py"
            link = f'<a href="{escape(os.path.relpath(trajectory, html_dir))}">trajectory</a>' + (
                f' <a href="{escape(os.path.relpath(best, html_dir))}">best</a>' if r.correct and best.is_file() else "")
        speed = f"{r.speedup:.2f}x" if r.speedup is not None else ("untimed" if r.correct else "-")
        cost = "?" if r.cost_usd is None else f"{r.cost_usd:.3f}"
        why = escape(r.failure_class or "") + (f' <span class="ci">{escape(r.message[:80])}</span>' if r.outcome in ("infra", "skipped") else "")
        rows.append(f'<tr><td class=l>{escape(r.model)}</td><td class=l>{escape(r.problem)}</td><td>{r.sample}</td>'
                    f'<td class="l {r.outcome}">{r.outcome}</td><td data-v="{r.speedup or 0}">{speed}</td><td>{r.best_step or "-"}</td>'
                    f'<td>{r.steps_used}</td><td>{r.tokens}</td><td>{cost}</td><td>{r.wall_s:.0f}</td><td class=l>{why}</td>'
                    f'<td class=l>{link}</td></tr>')
    head = "".join(f"<th{' class=l' if h in ('model', 'problem', 'outcome', 'why', 'files') else ''}>{h}</th>" for h in
                   ("model", "problem", "sample", "outcome", "speedup", "best step", "calls", "tokens", "cost $", "wall s", "why", "files"))
    return (f'<input id="episode-filter" placeholder="filter episodes (model, problem, outcome)">'
            f'<table class="sortable" id="episodes"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>')


def plots_html(summary: dict[str, Any]) -> str:
    models = summary["models"]
    curves = {label: [(p, v) for p, v in m["fast_p_curve"]] for label, m in models.items()}
    plots = [svg.line_chart("fast_p: correct and more than p times faster", curves, "p (speedup over the reference)", "share of episodes",
                            x_fmt=".1f")]
    categories = sorted({c for m in models.values() for c in m["per_category"]})
    values = {(label, c): m["per_category"][c]["fast_1"]["value"] if c in m["per_category"] else None
              for label, m in models.items() for c in categories}
    correct = {(label, c): m["per_category"][c]["correct"]["value"] if c in m["per_category"] else None
               for label, m in models.items() for c in categories}
    plots.append(svg.heatmap("per category: fast_1", list(models), categories, values))
    plots.append(svg.heatmap("per category: correct", list(models), categories, correct))
    steps = {label: [(s["step"], s["correct"] or 0.0) for s in m["per_step"]] for label, m in models.items()}
    faster = {label: [(s["step"], s["fast_1"] or 0.0) for s in m["per_step"]] for label, m in models.items()}
    plots.append(svg.line_chart("after step s: share correct", steps, "step", "share of episodes", x_fmt=".0f", markers=True))
    plots.append(svg.line_chart("after step s: share correct and faster", faster, "step", "share of episodes", x_fmt=".0f", markers=True))
    points = [(label, m["spend"]["cost_usd"], m["fast_p"]["1"]["value"] or 0.0) for label, m in models.items()]
    plots.append(svg.scatter("cost against score", points, "spend (USD)", "fast_1"))
    return '<div class="plots">' + "".join(plots) + "</div>"


def render_report(summary: dict[str, Any], results: list[tuple[Path, EpisodeResult]], html_path: Path, sources: list[Path]) -> str:
    html_dir = Path(html_path).resolve().parent
    models = summary["models"]
    infra = sum(m["infra_failures"] for m in models.values())
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>kernel-loop batch report</title>
<meta name="viewport" content="width=device-width, initial-scale=1"><style>{CSS}</style></head>
<body>
<h1>kernel-loop batch report</h1>
<p class="note">{summary['episodes']} episodes from {escape(', '.join(str(s) for s in sources))}; generated {time.strftime('%Y-%m-%d %H:%M')}.
Scores count scored episodes only: {infra} infrastructure failures (provider, sandbox, harness) are shown beside them and kept out.
Intervals are 95% bootstrap intervals ({summary['bootstrap']['unit']}); a rank marked = overlaps another model's interval.
fast_p: correct and more than p times as fast as the reference (KernelBench); fast_1 sure: the answer's own timing interval lies above 1.</p>
<h2>Leaderboard</h2>{leaderboard_html(summary)}
<h2>Plots</h2>{plots_html(summary)}
<h2>Per problem</h2>
<p class="note">Best correct speedup of each model with its timing interval; models whose interval overlaps the leader's are tied, not ranked.</p>
{problems_html(summary)}
<h2>Episodes</h2>{episodes_html(results, html_dir)}
<script>{SCRIPT}</script>
</body></html>
"""
