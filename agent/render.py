"""Terminal rendering of reports and tables (rich)."""

from __future__ import annotations

from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from sandbox.report import EvalReport

STATUS_STYLE = {"correct": "bold green", "wrong": "bold red", "build_failed": "bold yellow", "crashed": "bold red",
                "timeout": "bold magenta", "rejected": "bold red"}


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
                          verdict.message[:100])
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
    if report.reference_cache != "off":
        line.append(f"reference cache {report.reference_cache}")
    if line:
        parts.append(Text("  ".join(line)))
    if report.profile:
        table = Table(title=f"profile, rank 0, {report.profile.iterations} calls", title_justify="left", show_edge=False)
        for column in ("kernel", "calls", "total us", "share"):
            table.add_column(column)
        for kernel in report.profile.kernels[:8]:
            table.add_row(kernel.name[:70], str(kernel.calls), f"{kernel.total_us:.1f}", f"{100 * kernel.share:.0f}%")
        parts.append(table)
    for note in report.notes:
        parts.append(Text(f"note: {note}", style="italic"))
    if report.build_log:
        parts.append(Panel(report.build_log.text()[-4000:], title="build log", title_align="left"))
    for excerpt in report.logs:
        parts.append(Panel(excerpt.text()[-3000:], title=excerpt.name, title_align="left"))
    return Group(*parts)


def print_report(report: EvalReport, console: Console | None = None) -> None:
    (console or Console()).print(report_renderable(report))
