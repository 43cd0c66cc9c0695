"""The hostile corpus (tests/fixtures/hostile) and its honest controls (tests/fixtures/honest):
reading a fixture's header, the judge's configuration for it, and what its report must not be.

Fixtures are never imported here: they run only inside the judge. What a fixture expects is in
its ``# kloop-*`` header lines (tests/fixtures/README.md).
"""

from __future__ import annotations

import glob
import os
import re
import site
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
# a candidate doing the reference's work (or less, by cheating) must not report more. On the CPU the limit sits above what
# equal work reads: the reference as its own candidate read 0.27-2.82x over 20 runs at world 2 on a two-core host
# (`benchmarks/hostile_report.py --worlds 2 --repeat 20 --only all_reduce_reference_copy`); on a GPU 0.96-1.08x
FAST_LIMIT = {"cpu": 4.0, "cuda": 2.5, "emulate": 2.5}
LOG_CAP_CHARS = 20_000
CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f]")  # what a report may carry of one rank's output


@dataclass(frozen=True)
class Fixture:
    kind: str  # hostile or honest
    name: str
    path: Path
    problem: str = "all_reduce"
    allow_nccl: bool = True
    expect: str = "not-correct"
    worlds: tuple[int, ...] = (2, 4, 8)
    leaves: tuple[str, ...] = ()
    device: str = "cpu"
    size: str | None = None
    timed: bool = False
    message: str | None = None
    known_hole: str | None = None  # a breach this judge cannot stop yet (the reason): the test is a strict xfail
    rank_memory_gib: float | None = None  # the harness's host-memory limit per rank, where the fixture needs a small one
    workdir_gib: float | None = None  # what the candidate's work folder may hold, where the fixture needs a small limit
    summary: str = field(default="", compare=False)

    @property
    def id(self) -> str:
        return f"{self.kind}/{self.name}"

    def source(self) -> str:
        return self.path.read_text()


def _header(text: str) -> dict[str, str]:
    return {m.group(1): m.group(2).strip() for m in re.finditer(r"^# kloop-([a-z-]+):(.*)$", text, re.MULTILINE)}


def load(path: Path) -> Fixture:
    text = path.read_text()
    head = _header(text)
    expect = head.get("expect", "not-correct" if path.parent.name == "hostile" else "correct")
    first = text.split('"""')[1].splitlines()[0] if text.startswith('"""') else path.stem
    return Fixture(
        kind=path.parent.name, name=path.stem, path=path, problem=head.get("problem", "all_reduce"),
        allow_nccl=head.get("allow-nccl", "yes") == "yes", expect=expect,
        worlds=tuple(int(w) for w in head.get("worlds", "2,4,8").split(",")),
        leaves=tuple(p.strip() for p in head.get("leaves", "").split(",") if p.strip()),
        device=head.get("device", "cpu"), size=head.get("size"),
        timed=expect == "not-fast" or head.get("timed") == "yes", message=head.get("message"), known_hole=head.get("known-hole"), summary=first,
        rank_memory_gib=float(head["rank-memory-gib"]) if "rank-memory-gib" in head else None,
        workdir_gib=float(head["workdir-gib"]) if "workdir-gib" in head else None,
    )


def corpus(kind: str, device: str = "cpu") -> list[Fixture]:
    found = [load(p) for p in sorted((FIXTURES / kind).glob("*.py"))]
    return [f for f in found if f.device == device or device == "any"]


def config(fixture: Fixture, world: int, device: str | None = None, **overrides):
    from sandbox.harness.config import HarnessConfig, StageTimeouts

    mode = device or fixture.device
    timed = fixture.timed and mode != "emulate"
    base = dict(problem=fixture.problem, world=world, device=mode, allow_nccl=fixture.allow_nccl, trials=3, timed=timed,
                iterations=12, warmup=1, timing_budget_s=4.0, size=fixture.size, profile=False,
                timeouts=StageTimeouts(startup_s=180, build_s=180, correctness_s=90, performance_s=180, profile_s=90))
    if fixture.rank_memory_gib is not None:
        base["rank_memory_gib"] = fixture.rank_memory_gib
    if fixture.workdir_gib is not None:
        base["workdir_gib"] = fixture.workdir_gib
    return HarnessConfig(**{**base, **overrides})


# ---------------------------------------------------------------------------- what the judge must not say
def leaf_patterns(fixture: Fixture, box_workdir: str) -> list[str]:
    from kloop_runtime.settings import compile_cache_dir

    sites = [p for p in {*site.getsitepackages(), site.getusersitepackages(), *(p for p in sys.path if "site-packages" in p)}
             if os.path.isdir(p)]
    patterns = []
    for leaf in fixture.leaves:
        if "{site}" in leaf:
            patterns += [leaf.replace("{site}", s) for s in sites]
        else:
            patterns.append(leaf.replace("{box}", box_workdir).replace("{cache}", str(compile_cache_dir())))
    return patterns


def existing_leaves(patterns: list[str], since: float, wait_s: float = 8.0) -> list[str]:
    """Files matching ``patterns`` changed at or after ``since`` (so another run's old files never
    count), still there ``wait_s`` after the first look: a group ends in the background after a
    correct verdict, and its folder goes with it."""
    deadline = time.monotonic() + wait_s
    while True:
        found = []
        for pattern in patterns:
            for path in glob.glob(pattern):
                try:
                    if os.lstat(path).st_mtime >= since - 1:
                        found.append(path)
                except OSError:
                    continue
        if not found or time.monotonic() >= deadline:
            return found
        time.sleep(0.2)


def orphans(box_workdir: str, wait_s: float = 8.0) -> list[str]:
    """Processes still running from a candidate group that has ended (its folder is gone): a
    forked rank keeps the rank's command line, which names its group's folder."""
    import psutil

    deadline = time.monotonic() + wait_s
    while True:
        found = []
        for proc in psutil.process_iter(["pid", "cmdline"]):
            try:
                line = " ".join(proc.info["cmdline"] or [])
            except (psutil.Error, TypeError):
                continue
            if box_workdir not in line:
                continue
            for match in re.finditer(r"(/[^\s\"']*?/candidate(?:-\d+)?)/", line):
                if not os.path.exists(match.group(1)):
                    found.append(f"{proc.info['pid']}: {line[:160]}")
                    break
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.5)


def verdict_problems(fixture: Fixture, report) -> list[str]:
    """Why ``report`` is not an acceptable verdict for ``fixture`` (empty when it is)."""
    problems = []
    status, speedup = report.status, report.speedup
    said = f"{status} ({report.message[:300]!r}, speedup {speedup})"
    # "the harness ..." / "the warm harness ...": it died or hung with no report (sandbox/evaluate.py)
    if any("bug in kernel-loop" in note for note in report.notes) or report.message.startswith(
            ("harness error", "the harness ", "the warm harness ")):
        problems.append(f"candidate data caused a harness failure: {said}")
    if status != "correct" and speedup is not None:
        problems.append(f"a {status} report carries a speedup: {said}")
    if status != "correct" and not report.message.strip():
        problems.append(f"a {status} verdict without a message")
    for text in [report.message, *(v.message for v in report.ranks)]:
        if CONTROL.search(text):
            problems.append(f"the verdict carries raw control characters from a rank: {text[:80]!r}")
    for excerpt in report.logs:
        text = excerpt.text()
        if "\x1b" in text or "\x07" in text or "\r" in text:
            problems.append(f"log {excerpt.name!r} carries raw control characters")
        if len(text) > LOG_CAP_CHARS:
            problems.append(f"log {excerpt.name!r} is {len(text)} characters (not capped)")
    expect = fixture.expect
    if fixture.timed and expect == "not-correct" and report.reference_timing is None and report.device == "emulate":
        expect = "not-fast"  # an attack on timing, in a mode that never times: correct outputs, no speedup, is its due
    if expect == "correct" and status != "correct":
        problems.append(f"an honest control was not judged correct: {said}")
    elif expect == "not-correct" and status == "correct":
        problems.append(f"judged correct: {said}")
    elif expect == "not-fast" and status == "correct" and speedup is not None and speedup > FAST_LIMIT[report.device]:
        problems.append(f"correct with an unearned speedup: {said}")
    elif expect == "build_failed" and status != "build_failed":
        problems.append(f"expected build_failed: {said}")
    if fixture.message and status != "correct" and not re.search(fixture.message, report.message):
        problems.append(f"the verdict does not say {fixture.message!r}: {said}")
    return problems


def caught_by(report) -> str:
    """A few words on what decided the verdict, for the report table."""
    message = " ".join(report.message.split())
    if report.status == "correct":
        return "-" if report.speedup is None else f"clock check {report.timing_check.clock_floor_ms if report.timing_check else '-'} ms floor"
    return f"{report.stage}: {message[:90]}"
