"""Terminal rendering of reports and tables (rich)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.console import Console, Group
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from sandbox.report import EvalReport, ProfileSummary, inert
from sandbox.topology_measure import HostMeasurement

if TYPE_CHECKING:
    from problems.contract import Problem
    from sandbox.problem_lint import LintResult
    from sandbox.topology import ProblemRoofline

# The colour of each status: an evaluation's, and a run step's (provider_error); reports show it bold.
STATUS_COLORS = {"correct": "green", "wrong": "red", "build_failed": "yellow", "crashed": "red", "timeout": "magenta",
                 "rejected": "red", "provider_error": "red"}
STATUS_STYLE = {status: f"bold {color}" for status, color in STATUS_COLORS.items()}


def _fmt(value: float | None, digits: int = 4) -> str:
    return "-" if value is None else f"{value:.{digits}g}"


def report_renderable(report: EvalReport) -> Group:
    header = Text.assemble(
        (f"{report.problem}", "bold"), f"  world {report.world}  {report.device}  {report.dtype} ({report.size})  ",
        (report.status.upper(), STATUS_STYLE.get(report.status, "bold")), f"  in {report.wall_s:.1f} s",
    )
    parts: list = [header, Text(report.message)]
    if report.ranks:
        table = Table(title="per rank", title_justify="left", show_edge=False)
        for column in ("rank", "verdict", "max abs err", "max rel err", "note"):
            table.add_column(column)
        for verdict in report.ranks:
            table.add_row(str(verdict.rank), "ok" if verdict.ok else "FAIL", _fmt(verdict.max_abs_err), _fmt(verdict.max_rel_err),
                          Text(verdict.message[:100]))  # a rank's words: never markup
        parts.append(table)
    if report.mismatch and report.mismatch.kind == "values":
        m = report.mismatch
        parts.append(Text(f"mismatch: rank {m.rank} trial {m.trial} output {m.output_index}: {m.mismatched}/{m.numel} elements out of bound, "
                          f"max abs err {m.max_abs_err:.4g}, RMS {m.rms_err:.3g} (bound {m.rms_bound:.3g}); native bf16 reference's own "
                          f"max error {m.reference_max_abs_err:.3g}"))
    if report.reference_timing or report.candidate_timing:
        table = Table(title="timing (slowest rank's median)", title_justify="left", show_edge=False)
        for column in ("", "median ms", "IQR ms", "min ms", "per-rank medians ms", "iters"):
            table.add_column(column)
        for name, timing in (("reference", report.reference_timing), ("candidate", report.candidate_timing)):
            if timing:
                table.add_row(name, _fmt(timing.median_ms), _fmt(timing.iqr_ms, 3), _fmt(timing.min_ms),
                              " ".join(_fmt(m, 3) for m in timing.per_rank_median_ms), str(timing.iterations))
        parts.append(table)
    line = []
    if report.speedup is not None:
        line.append(f"speedup {report.speedup:.2f}x")
    if report.roofline is not None:
        line.append(f"roofline {report.roofline.bound_ms:.4g} ms ({report.roofline.limiter}-bound)")
    if report.roofline_fraction is not None:
        line.append(f"{100 * report.roofline_fraction:.1f}% of roofline")
    if report.achieved_comm_gbps is not None:
        line.append(f"{report.achieved_comm_gbps:.1f} GB/s per rank over the interconnect")
    if report.profile_cache != "off":
        line.append(f"profile cache {report.profile_cache}")
    if line:
        parts.append(Text("  ".join(line)))
    if report.analysis is not None:
        parts.append(_analysis_text("candidate", report.analysis))
    if report.reference_analysis is not None:
        parts.append(_analysis_text("reference", report.reference_analysis))
    for name, profile in (("candidate", report.profile), ("reference", report.reference_profile)):
        if profile:
            parts.append(_profile_table(name, profile))
    for note in report.notes:
        parts.append(Text(f"note: {note}", style="italic"))
    if report.build_log:
        parts.append(Panel(report.build_log.text()[-4000:], title="build log", title_align="left"))
    for excerpt in report.logs:
        parts.append(Panel(excerpt.text()[-3000:], title=excerpt.name, title_align="left"))
    return Group(*parts)


def _profile_table(name: str, profile: ProfileSummary) -> Table:
    table = Table(title=f"{name} profile, rank {profile.rank}, {profile.iterations} calls", title_justify="left", show_edge=False)
    for column in ("kernel", "kind", "calls", "total us", "share"):
        table.add_column(column)
    for kernel in profile.kernels[:8]:
        table.add_row(kernel.name[:70], kernel.kind, str(kernel.calls), f"{kernel.total_us:.1f}", f"{100 * kernel.share:.0f}%")
    return table


def _analysis_text(name: str, analysis) -> Text:
    from prompts import render

    line = f"{name}: {analysis.call_ms:.4g} ms"
    if analysis.busy_ms is not None:
        line += (f", busy {analysis.busy_ms:.3g} ms (communication {analysis.communication_ms:.3g}, compute {analysis.compute_ms:.3g}, "
                 f"custom {analysis.custom_ms:.3g}, copy {analysis.copy_ms:.3g}, other {analysis.other_ms:.3g}), "
                 f"idle {analysis.idle_ms:.3g} ms ({100 * analysis.idle_fraction:.0f}%)")
    if analysis.bottleneck:
        line += "\n  bound: " + render("feedback/bottleneck", a=analysis).strip()
    return Text(line)


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def topology_renderable(measurement: HostMeasurement) -> Group:
    gpus = Table(title=f"{measurement.host}: {len(measurement.gpus)} GPU(s), {measurement.link}, driver {measurement.driver}, "
                       f"torch {measurement.torch}", title_justify="left", show_edge=False)
    for column in ("gpu", "name", "SMs", "memory GiB", "NVLinks", "HBM copy GB/s"):
        gpus.add_column(column)
    for gpu in measurement.gpus:
        gpus.add_row(str(gpu.ordinal), gpu.name, str(gpu.sm_count), f"{gpu.memory_mib / 1024:.0f}", str(gpu.nvlinks_active),
                     _rate(gpu.hbm_copy_gbps))
    parts: list = [gpus]
    if measurement.pairs:
        pairs = Table(title=f"peer bandwidth, GB/s per direction ({measurement.transfer_mib} MiB transfers)", title_justify="left",
                      show_edge=False)
        for column in ("src -> dst", "P2P", "copy engine", "SM push", "SM pull"):
            pairs.add_column(column)
        for pair in measurement.pairs:
            pairs.add_row(f"{pair.src} -> {pair.dst}", "yes" if pair.peer_access else "no", _rate(pair.copy_engine_gbps),
                          _rate(pair.sm_write_gbps), _rate(pair.sm_read_gbps))
        parts.append(pairs)
    summary = [f"median HBM copy {_rate(measurement.median_hbm_copy_gbps())} GB/s"]
    if measurement.pairs:
        summary.append(f"median peer: copy engine {_rate(measurement.median('copy_engine_gbps'))}, "
                       f"push {_rate(measurement.median('sm_write_gbps'))}, pull {_rate(measurement.median('sm_read_gbps'))} GB/s")
    if measurement.all_peers_write_gbps:
        summary.append(f"all GPUs pushing to all peers at once: {measurement.all_peers_write_gbps:.0f} GB/s per GPU")
    if measurement.sm_write_gbps_by_blocks:
        summary.append("push 0 -> 1 by blocks: " + ", ".join(f"{b}: {g:.0f}" for b, g in measurement.sm_write_gbps_by_blocks.items()))
    summary.append(f"roofline link rate: {_rate(measurement.best_link_gbps())} GB/s" if measurement.best_link_gbps()
                   else "roofline link rate: datasheet (no peer measured)")
    parts.extend(Text(line) for line in summary)
    parts.extend(Text(f"note: {note}", style="italic") for note in measurement.notes)
    parts.append(Text(f"measured {measurement.measured_at} in {measurement.wall_s:.1f} s", style="dim"))
    return Group(*parts)


def print_topology(measurement: HostMeasurement, console: Console | None = None) -> None:
    (console or Console()).print(topology_renderable(measurement))


def print_report(report: EvalReport, console: Console | None = None) -> None:
    (console or Console()).print(report_renderable(report))


def step_line(record: dict[str, Any], steps: int) -> str:
    """One line (rich markup) per step of a run, as ``kloop run`` prints them."""
    speed = f"{record['speedup']:.2f}x" if record.get("speedup") is not None else "-"
    cost = f"${record['cost_usd']:.3f}" if record.get("cost_usd") is not None else "$?"
    status = record["status"]
    style = STATUS_COLORS.get(status, "yellow")
    return (f"step {record['step']:>2}/{steps}  [{style}]{status:<14}[/]  {speed:>8}  {record['tokens'] / 1000:>7.1f}k tok  {cost:>8}  "
            f"{record['wall_s']:>6.1f} s  {escape(inert(record.get('message', '')[:90]))}")


def spend_line(model_calls: int, input_tokens: int, output_tokens: int, cost_usd: float | None, wall_s: float) -> str:
    """What a run used, in one line, as ``kloop run`` ends."""
    cost = f"${cost_usd:.3f}" if cost_usd is not None else "unknown (no price for this model, or no usage reported)"
    return f"{model_calls} model calls, {input_tokens} input + {output_tokens} output tokens, cost {cost}, {wall_s:.0f} s"


def problems_table(problems: list[Problem], rooflines: dict[str, ProblemRoofline | None], where: str) -> Table:
    table = Table(show_edge=False, title=f"roofline: default size at the largest declared world size, {where}", title_justify="left")
    for column in ("name", "category", "pattern", "world sizes", "dtype", "roofline ms", "origin"):
        table.add_column(column, overflow="fold")
    for p in problems:
        bound = rooflines[p.name]
        shown = "-" if bound is None else f"{bound.ms:.3g} ({bound.limiter}, W={bound.world})"
        table.add_row(p.name, p.spec.category, p.spec.pattern, ",".join(map(str, p.spec.world_sizes)), p.spec.dtype, shown, p.spec.origin)
    return table


def lint_renderable(results: list[LintResult]) -> Group:
    table = Table(show_edge=False)
    table.add_column("problem", no_wrap=True)
    for column in ("world", "verdict", "checks", "wall s", "failed checks"):
        table.add_column(column, overflow="fold")
    for r in results:
        failed = "\n".join(f"{c.name}: {c.message}" for c in r.failures)
        table.add_row(r.problem, str(r.world), "[green]ok[/]" if r.ok else "[bold red]FAIL[/]",
                      f"{len(r.checks) - len(r.failures)}/{len(r.checks)}", f"{r.wall_s:.1f}", failed)
    bad = sum(not r.ok for r in results)
    return Group(table, Text(f"{len(results) - bad} of {len(results)} problem x world checks passed", style="red" if bad else "green"))
