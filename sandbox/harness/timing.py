"""Timings as claims, checked against the parent's own clock; statistics that compare across runs.

Each timed call is one ``call`` command to every rank of a group. A rank reports how long the
call took by its own account (CUDA events between two device-wide syncs, or the host clock on
the CPU); the parent measures, on a clock no rank can touch, the wall time from sending the
command to the last rank's answer. The difference is the harness's own cost of a call (the
message, the alignment, the syncs, the checksum of the outputs), which does not depend on the
solution: the reference, run through the very same rounds on inputs of the same sizes, shows
what it is; on a GPU, a calibration of each group's processes (the same harness work with no
solution in it, before any candidate code is loaded) takes out what the candidate's processes are
surely slower or faster by on their own, and measures the empty timed interval taken off every
call. A candidate whose calls leave much more time unaccounted for than
the reference's (work hidden before its timer starts, after it stops, or in what it claims) is
``rejected``; so is one that claims more time than passed, or a speed beyond the roofline.

The reported time is the median over calls of the slowest rank's claimed time (calls are aligned),
less the empty interval measured before the candidate existed, and never less than what the
parent's clock shows (its median wall time per call less the reference's overhead, less its
uncertainty): a claim too small to be caught by the check above still cannot make a call look
faster than the clock allows. A timing that passes the check only thanks to the allowance for
process groups that differ (beyond what its noise explains) is read on the clock's estimate
itself, and staging time beyond the noise is added to it; on the host CPU, where the noise could
hide more staging than a call claims, so is the staging beyond the reference's within the noise
(STAGING_CHARGED_WITHIN_NOISE). On the host CPU the floor is never below a share of the clock's
estimate (CLOCK_SHARE_FLOOR): there the noise can exceed the call itself, and a lower bound of zero
lets any claim stand. Where the clock's estimate itself is not above zero it bounds nothing, and no
speedup is reported. The speedup is the ratio of the two groups' medians, with a bootstrap
interval over the interleaved rounds.
"""

from __future__ import annotations

import math
import random
import statistics
from dataclasses import dataclass, field

from sandbox.report import ClockCheck, Roofline

HIDDEN_FRACTION = 0.25  # unaccounted time may exceed the reference's by this share of the claimed call...
CONFIDENCE = 3.0  # ...plus this many standard errors of the difference (from the reference's own spread)...
FLOOR_MS = {"cuda": 0.01, "emulate": 1.0, "cpu": 0.1}  # ...plus this much...
# ...plus this share of the harness's own cost of a call (the reference's unaccounted time; for the staging check, its
# staging time): what two groups of processes differ by beyond their calibration, which no standard error covers (it
# holds for a whole timing, not call by call). On the H200 at 64 MB a call's harness work (flush, syncs, the commitment:
# a copy of the outputs and inputs to the host and their SHA-256) takes 20-25 ms, and an honest candidate's processes took
# 1.9 ms (9%) more than the reference's after calibration. On a loaded two-core host (CI) the reference as its own
# candidate left 0.55-0.61x the reference's 1.0-1.3 ms unaccounted on top, for both of a run's timings, and took 0.73x
# its staging time on top; a calibration on the CPU found nothing systematic (the load comes and goes). Only against a
# rejection, never off the clock's floor: what the allowance lets through is read on the clock (check_clock; taking the
# allowance off the floor let a CPU work_after_timer read 968x)
SYSTEMATIC_SHARE = {"cuda": 0.12, "cpu": 1.0}
# The same for the staging check. On the H200 staging 128 MB a call (a pageable copy to the device) took 11-16 ms a round
# in either group, and an honest candidate (the reference as its own candidate) took 1.15x and 1.21x the reference's
# staging time in the two timings of one evaluation, which its calibration did not show: rejected as precomputing, on
# 2026-12-02 (tests/sandbox/harness/test_hostile_timing.py). What this lets through is charged (check_clock)
STAGING_SHARE = {"cuda": 0.3, "cpu": 1.0}
# Where the staging check's noise allowance could hide more work than a call claims, the staging beyond the reference's is
# charged to the call at its point estimate. On a loaded two-core host (CI) the reference's staging varied 0.3-1.1 ms a
# call over an evaluation's 4 rounds, the allowance for noise reached 1.7 ms a call, and tests/fixtures/hostile/
# precompute_at_stage.py (1.7 ms a call moved into staging, claims of 0.003 ms) read 508x and 1154x, correct (1 in 40
# evaluations beside one busy process). On the host CPU only: an honest candidate pays the positive half of the noise; on a
# GPU a call's inputs are masked until the call (sandbox/rank/input_mask.py), so nothing can be computed while they are staged
STAGING_CHARGED_WITHIN_NOISE = {"cpu"}
# On the host CPU a call is never read below this share of the clock's estimate, however noisy the timings: in CI on
# 2026-12-06 (a two-core host loaded by builds beside the tests) three standard errors of the reference's unaccounted
# time exceeded a call's whole estimate, the clock's floor fell to zero, and a rank claiming 0.01 ms a call read 18073x,
# correct (tests/fixtures/hostile/pause_defeated_by_vfork.py). Where the noise is that large an honest claim cannot be
# told from a lie either, and is read on the clock too (with a note); on a quiet host an honest claim stays well above it
CLOCK_SHARE_FLOOR = {"cpu": 0.75}
OVERCLAIM_SLACK_MS = 0.5  # a rank may claim at most the parent's wall time plus this
ROOFLINE_MARGIN = 1.5  # a call faster than roofline / this is impossible on this hardware...
# ...or than roofline / this where the bound is HBM traffic at the datasheet's rate: a rate no kernel exceeds (the margin is
# for error in measured rates), and after the flush a call's reads come from HBM and its writes evict dirty lines. On the
# H200 on 2026-12-03 (world 1, 64 MiB a call) honest kernels read 6-14% of such a roofline (benchmarks/oracles.py: the
# all_gather, all_reduce and all_to_all oracles and references) and a bare `clone()`, the least an all_reduce at world 1
# can do, 26-29% (43% its fastest call); work hidden in staging or after the timer read 112-147% of it, `correct`
# (tests/fixtures/hostile/precompute_at_stage.py, work_after_timer.py)
HBM_DATASHEET_MARGIN = 1.1
# a reference whose call on the device (its launch hidden) is less than this share of its timed call is mostly the host's
HOST_BOUND_SHARE = 0.5
BOOTSTRAP_SAMPLES = 1000
PRECISION_SAMPLES = 200  # bootstrap resamples for deciding whether to time more (the reported interval takes the full count)
REACH_SLACK = 1.5  # timing goes on while the most calls allowed may bring the interval within this many times the precision
MAD_TO_SE = 1.4826 * 1.2533  # MAD -> standard deviation -> standard error of a median (per sqrt(n))


@dataclass
class Round:
    """One group's round of timed calls: per call, each rank's claimed ms and the parent's wall
    ms; the wall ms of staging the round's inputs; the round's call count."""

    claimed_ms: list[list[float]] = field(default_factory=list)  # [call][rank]
    wall_ms: list[float] = field(default_factory=list)  # [call]
    stage_ms: float = 0.0

    def step_ms(self, overheads_ms: list[float]) -> list[float]:
        """Per call, the slowest rank's claimed time less its calibrated empty interval."""
        return [max(max(ms - overheads_ms[rank], 0.0) for rank, ms in enumerate(ranks)) for ranks in self.claimed_ms]

    def unclaimed_ms(self) -> list[float]:
        return [wall - max(ranks) for wall, ranks in zip(self.wall_ms, self.claimed_ms)]


@dataclass
class Series:
    """A group's timed rounds (warm-up rounds are not kept) and its calibration."""

    overheads_ms: list[float]
    rounds: list[Round] = field(default_factory=list)

    def steps(self) -> list[float]:
        return [ms for r in self.rounds for ms in r.step_ms(self.overheads_ms)]

    def unclaimed(self) -> list[float]:
        return [ms for r in self.rounds for ms in r.unclaimed_ms()]

    def staging_per_call(self) -> list[float]:
        return [r.stage_ms / max(len(r.wall_ms), 1) for r in self.rounds]

    def per_rank_medians(self) -> list[float]:
        """Each rank's median claimed ms less its empty interval (a calibration's series has none
        and takes nothing off)."""
        ranks = len(self.rounds[0].claimed_ms[0]) if self.rounds and self.rounds[0].claimed_ms else 0
        overheads = self.overheads_ms or [0.0] * ranks
        return [statistics.median(max(call[rank] - overheads[rank], 0.0) for r in self.rounds for call in r.claimed_ms)
                for rank in range(ranks)]


def empty_interval(reference_ms: list[float], candidate_ms: list[float]) -> list[float]:
    """Each rank's empty timed interval (syncs, barrier, events: no call), one for both groups,
    the lesser of the two groups' measures. It is the GPU's and the harness's, not a process's, and
    each group measures it before any candidate code (at start-up; on a GPU again in each
    evaluation's calibration, which is what is taken there): a measure inflated by a
    busy host would take from every call time the call did take (on the H200 an honest
    candidate's 0.066 ms copy, less a 0.27 ms start-up measure against the reference's 0.013 ms,
    read 0.0 ms and got no speedup). Both groups subtract the same amount, no more than either
    measured: no call reads shorter than its own group's measure would have made it."""
    return [min(reference, candidate) for reference, candidate in zip(reference_ms, candidate_ms, strict=True)]


class TimingRejected(Exception):
    """The claims do not hold up; the message says how."""


def _mad(values: list[float]) -> float:
    if len(values) < 2:
        return 0.0
    center = statistics.median(values)
    return statistics.median(abs(v - center) for v in values)


def _difference_error(reference: list[float], n_candidate: int) -> float:
    """Standard error of a difference of medians, from the reference's spread alone: a candidate
    cannot widen the tolerance by making its own answers noisy."""
    return MAD_TO_SE * _mad(reference) * math.sqrt(1 / max(len(reference), 1) + 1 / max(n_candidate, 1))


def _offset(candidate: list[float], reference: list[float], faster_too: bool = False) -> float:
    """How much more ``candidate`` surely takes than ``reference`` (the difference of medians less
    one standard error), else 0: a candidate's processes get credit for being slower on their own,
    never a tolerance widened by a noisy calibration. With ``faster_too``, as surely less is
    negative: the check of a call's unaccounted time, and the clock's estimate, then start from the
    candidate's processes' own lower cost (on the H200 on 2026-12-06 an honest copy's processes left
    0.15 ms a call less unaccounted than the reference's, and the clock's estimate of its call fell
    below zero: no speedup; a lie there gains what those processes save)."""
    if not candidate or not reference:
        return 0.0
    difference = statistics.median(candidate) - statistics.median(reference)
    error = _difference_error(reference, len(candidate))
    if faster_too and difference < -error:
        return difference + error
    return max(difference - error, 0.0)


def check_clock(candidate: Series, reference: Series, device: str, candidate_calibration: Series | None = None,
                reference_calibration: Series | None = None, reference_alone: Series | None = None) -> ClockCheck:
    """Raise TimingRejected when the candidate's claims disagree with the parent's clock; else the
    check's numbers, including the least time per call the parent's clock allows (``clock_floor_ms``).
    The calibrations (the harness's own work timed in each group's processes before any candidate
    code ran, on a GPU) take out what the candidate's processes are surely slower by on their own
    (for a call's unaccounted time, what they are surely faster by too; for staging, only where they
    are slower: on a GPU nothing can be computed from masked inputs while they are staged).
    ``reference_alone``, given when the reference ran slower beside the candidate than alone, is the
    yardstick of the harness's cost instead: work a candidate leaves running (a spin kernel queued
    on the GPU) inflated the reference's unaccounted time, which the clock takes out of the
    candidate's (tests/fixtures/hostile/inflate_reference_overhead.py, on the host CPU)."""
    floor = FLOOR_MS.get(device, FLOOR_MS["cpu"])
    if reference_alone is not None and reference_alone.rounds:
        reference = reference_alone
    cand_cal, ref_cal = candidate_calibration or Series([]), reference_calibration or Series([])
    offset = _offset(cand_cal.unclaimed(), ref_cal.unclaimed(), faster_too=True)
    stage_offset = _offset(cand_cal.staging_per_call(), ref_cal.staging_per_call())
    for r in candidate.rounds:
        for wall, ranks in zip(r.wall_ms, r.claimed_ms):
            if max(ranks) > wall + OVERCLAIM_SLACK_MS:
                raise TimingRejected(f"a rank claimed a call took {max(ranks):.3f} ms, but only {wall:.3f} ms passed on the "
                                     "harness's clock between giving it the call and its answer")
    claimed = statistics.median(candidate.steps())
    cand_unclaimed, ref_unclaimed = candidate.unclaimed(), reference.unclaimed()
    shift = statistics.median(cand_unclaimed) - statistics.median(ref_unclaimed) - offset
    error = _difference_error(ref_unclaimed, len(cand_unclaimed))
    share, staging_share = (table.get(device, table["cpu"]) for table in (SYSTEMATIC_SHARE, STAGING_SHARE))
    explained = HIDDEN_FRACTION * claimed + CONFIDENCE * error + floor  # what the timings' noise explains
    allowed = explained + share * max(statistics.median(ref_unclaimed), 0.0)
    cand_stage, ref_stage = candidate.staging_per_call(), reference.staging_per_call()
    stage_shift = statistics.median(cand_stage) - statistics.median(ref_stage) - stage_offset
    stage_explained = HIDDEN_FRACTION * claimed + CONFIDENCE * _difference_error(ref_stage, len(cand_stage)) + floor
    allowed_stage = stage_explained + staging_share * max(statistics.median(ref_stage), 0.0)
    # the call's time on the clock: the wall time less the harness's cost of a call (the reference's unaccounted time) and
    # less the empty timed interval that the claims are read net of (Series.step_ms), so that the two compare; with a
    # 0.18 ms interval (the reverted launch gate, 0660877) an honest copy of the reference read 0.22x of it without this
    empty = min(candidate.overheads_ms, default=0.0)
    estimate = (statistics.median(r_wall for r in candidate.rounds for r_wall in r.wall_ms) - statistics.median(ref_unclaimed)
                - offset - empty)
    # a timing let through only by the allowance for process groups that differ is not taken at its word: its call is
    # at least the clock's estimate itself, plus the staging time nothing explains (a CPU work_after_timer inside the
    # allowance read 2.8x on the claims and their clock floor)
    if shift > explained or stage_shift > stage_explained:
        clock_floor = estimate + (stage_shift if stage_shift > stage_explained else 0.0)
    elif device in STAGING_CHARGED_WITHIN_NOISE and stage_explained > claimed:
        clock_floor = estimate + max(stage_shift, 0.0) - CONFIDENCE * error - floor
    else:
        clock_floor = estimate - CONFIDENCE * error - floor
    clock_floor = max(clock_floor, CLOCK_SHARE_FLOOR.get(device, 0.0) * estimate)
    check = ClockCheck(candidate_unclaimed_ms=round(statistics.median(cand_unclaimed), 4),
                       reference_unclaimed_ms=round(statistics.median(ref_unclaimed), 4), allowed_excess_ms=round(allowed, 4),
                       candidate_staging_ms=round(statistics.median(cand_stage), 4),
                       reference_staging_ms=round(statistics.median(ref_stage), 4), allowed_staging_excess_ms=round(allowed_stage, 4),
                       clock_estimate_ms=round(estimate, 4), clock_floor_ms=round(max(clock_floor, 0.0), 6),
                       harness_offset_ms=round(offset, 4), staging_offset_ms=round(stage_offset, 4))
    if shift > allowed:
        raise TimingRejected(
            f"the harness's clock disagrees with the ranks' timings: each call took {shift:.3f} ms more than the ranks claimed, "
            f"beyond the harness's own cost of a call as the reference shows it ({check.reference_unclaimed_ms:.3f} ms, "
            f"{offset:+.3f} ms in the candidate's processes; allowed {allowed:.3f} ms more): work was done outside the timed "
            "interval, or the timings were altered")
    if stage_shift > allowed_stage:
        raise TimingRejected(
            f"staging a call's inputs took {check.candidate_staging_ms:.3f} ms against the reference's "
            f"{check.reference_staging_ms:.3f} ms (allowed {allowed_stage:.3f} ms more): work was done on the inputs before "
            "the timer started")
    return check


def reported_ms(claimed_ms: float, check: ClockCheck) -> tuple[float | None, str | None]:
    """The candidate's reported time per call: its claimed median, unless that is below what the
    parent's clock allows; then the clock's estimate (with a note saying so). Not the clock's lower
    bound: that sits 3 standard errors below the estimate, so a rank that claims nothing would
    read ref / (t - 3 SE) where it took t, a speedup without limit when the timings are noisy
    (tests/fixtures/hostile/timed_claims_zero.py). None (and a note) where the clock's estimate is
    not above zero: the harness's own cost of a call varied by more than the whole call, the clock
    bounds nothing, and no claim can be verified (an honest one no more than a lie)."""
    if check.clock_estimate_ms <= 0:
        return None, (f"the harness's clock could not resolve the call: its estimate of a call, {check.clock_estimate_ms:.4f} "
                      f"ms, is not above zero (the reference's calls left {check.reference_unclaimed_ms:.4f} ms unaccounted, "
                      "varying by more than the whole call), so the ranks' timings are not verified and no speedup is "
                      "reported; time a larger size (--size) or on a quieter machine")
    if claimed_ms >= check.clock_floor_ms:
        return claimed_ms, None
    reported = max(check.clock_estimate_ms, check.clock_floor_ms)
    charged = reported - max(check.clock_estimate_ms, 0.0)
    what = (f"the clock's estimate ({max(check.clock_estimate_ms, 0.0):.4f} ms) plus {charged:.4f} ms of staging beyond the "
            f"reference's ({check.candidate_staging_ms:.4f} against {check.reference_staging_ms:.4f} ms a call), "
            f"{reported:.4f} ms, is reported" if charged > 0.0 else f"the clock's estimate, {reported:.4f} ms, is reported")
    return reported, (f"the ranks' timings ({claimed_ms:.4f} ms per call) are less than the harness's clock allows (at least "
                      f"{check.clock_floor_ms:.4f} ms); {what}")


def speedup_interval(reference: Series, candidate: Series, reported: float | None = None, seed: int = 0,
                     samples: int = BOOTSTRAP_SAMPLES) -> tuple[float, float] | None:
    """A 95% bootstrap interval of median(reference) / median(candidate), resampling in two
    stages: the interleaved round pairs, then each chosen round's calls (resampling the rounds
    alone read 4 rounds of 4 noisy calls as about 3x more precise than they are, and on the H200
    five jobs' intervals of one candidate did not overlap). Scaled to ``reported`` where the
    speedup reported is not the claims' own ratio (the candidate read on the parent's clock, the
    reference taken alone), so that the interval is around the number it qualifies. None where
    the claims give no interval (a candidate that claims zero time: its speedup is read on the
    parent's clock alone)."""
    pairs = [(r.step_ms(reference.overheads_ms), c.step_ms(candidate.overheads_ms))
             for r, c in zip(reference.rounds, candidate.rounds)]
    pairs = [(r, c) for r, c in pairs if r and c]
    if not pairs:
        return None
    scale = 1.0
    if reported is not None:
        claims_median = statistics.median(candidate.steps())
        if claims_median > 0:
            scale = reported / (statistics.median(reference.steps()) / claims_median)
    rng = random.Random(seed)
    ratios = []
    for _ in range(samples):
        ref, cand = [], []
        for _ in pairs:
            r, c = pairs[rng.randrange(len(pairs))]
            ref.extend(rng.choices(r, k=len(r)))
            cand.extend(rng.choices(c, k=len(c)))
        cand_median = statistics.median(cand)
        if cand_median > 0:
            ratios.append(statistics.median(ref) / cand_median)
    if not ratios:
        return None
    ratios.sort()
    return ratios[int(0.025 * (len(ratios) - 1))] * scale, ratios[int(0.975 * (len(ratios) - 1))] * scale


def relative_half_width(reference: Series, candidate: Series) -> float:
    """The half-width of the speedup's 95% interval as a share of its point; 0.0 where no interval
    can be had (nothing more calls would make more precise)."""
    ref, cand = statistics.median(reference.steps()), statistics.median(candidate.steps())
    interval = speedup_interval(reference, candidate, samples=PRECISION_SAMPLES)
    if cand <= 0 or ref <= 0 or interval is None:
        return 0.0
    return (interval[1] - interval[0]) / 2 / (ref / cand)


def stop_reason(reference: Series, candidate: Series, precision: float, target: int, most: int, late: bool) -> str | None:
    """Why timing stops after the rounds so far, or None to time on: the planned ``target`` calls
    first (at least 10 once the budget ran out), then more, up to ``most``, while the speedup's 95%
    interval is wider than ``precision`` of it either way and more calls may get it there. Its
    half-width shrinks about as one over the square root of the calls; a projection from a few
    rounds is rough, hence REACH_SLACK. Out of reach, more calls are time spent on an interval that
    would still fall short: on the H200 on 2026-12-04, 64 calls of a 0.5 ms call left 7 runs'
    intervals +-7% to +-18%, with +-3% asked, and took 1.4-1.6 s of a 2.9 s evaluation. A candidate
    noisy on purpose gains nothing by it: it is still timed the planned calls, as every candidate is
    when no precision is asked. The reason is worded for the report's note on a wide interval."""
    calls = sum(len(r.wall_ms) for r in candidate.rounds)
    if calls < target:
        return "the timing budget ran out" if late and calls >= 10 else None
    if late or calls >= most:
        return "the timing budget ran out" if late else "the call limit was reached"
    half_width = relative_half_width(reference, candidate) if precision > 0 else 0.0
    if half_width <= precision:
        return "a quicker estimate of it (fewer resamples) read it as precise enough"
    projected = half_width * math.sqrt(calls / most)
    if projected > REACH_SLACK * precision:
        return f"at the spread seen, the {most} calls allowed would have left it about +-{projected:.0%}, so timing stopped there"
    return None


def host_bound_note(device_ms: float | None, timed_ms: float | None) -> str | None:
    """What a report says when the reference's timed call (``timed_ms``, alone) is mostly the
    host's: its launch and the sync. Measured on an H100 host on 2026-12-06, the all_reduce
    reference at world 1 (32 MiB) ran 0.0268-0.0269 ms on the device in each of 18 fresh processes, and
    0.084-0.228 ms timed as a rank times it, slow and fast processes minutes apart whatever their
    memory layout or CPU (``benchmarks/reference_call_noise.py --layouts``)."""
    if device_ms is None or not timed_ms or device_ms >= HOST_BOUND_SHARE * timed_ms:
        return None
    return (f"the reference's call is mostly the host's work: {device_ms:.4f} ms of its {timed_ms:.4f} ms ran on the device "
            "(timed with its launch hidden); the rest, launching it and waiting for it, moves with the host's pace from job to "
            "job (1.3-2.7x between processes minutes apart on an H100 host), and this speedup with it: compare it with other "
            "jobs' by their intervals, not their points; a faster kernel gains little here unless the host's work per call "
            "shrinks too")


def slowed(beside: list[float], alone: list[float], factor: float) -> bool:
    """Whether calls timed ``beside`` the candidate are slower than ``factor`` times the calls timed
    ``alone``, beyond the medians' standard error (a point ratio of two small samples read an
    honest candidate's reference as slowed)."""
    if not beside or not alone:
        return False
    # the spread of the calls alone only, taken before any candidate code existed: a candidate that slows the reference
    # unevenly must not widen the test (tests/fixtures/hostile/spin_while_reference_runs.py read 2.89x that way)
    error = MAD_TO_SE * factor * _mad(alone) * math.sqrt(1 / len(beside) + 1 / len(alone))
    return statistics.median(beside) - factor * statistics.median(alone) > CONFIDENCE * error


def roofline_margin(roofline: Roofline) -> float:
    """How far a call may beat ``roofline`` before it is impossible: HBM_DATASHEET_MARGIN where
    the bound is HBM traffic at the datasheet's rate, else ROOFLINE_MARGIN."""
    return HBM_DATASHEET_MARGIN if roofline.limiter == "hbm" and not roofline.hbm_measured else ROOFLINE_MARGIN


def faster_than_hardware(call_ms: float, roofline: Roofline) -> str | None:
    """A message when a call beats the roofline by more than its margin, else None. A call that
    took no measurable time is impossible only where the bound is one the timer resolves
    (FLOOR_MS): on an H200 an honest copy of 128 KiB (a bound of 0.00005 ms) measured nothing
    beyond the empty timed interval and was rejected as faster than the hardware."""
    bound_ms, margin = roofline.bound_ms, roofline_margin(roofline)
    if call_ms > 0 and call_ms < bound_ms / margin:
        return (f"faster than this hardware allows: a call took {call_ms:.4f} ms, and the roofline says no solution can take less "
                f"than {bound_ms:.4f} ms (the judge allows {margin}x for error in the roofline's rates)")
    if call_ms <= 0 and bound_ms / margin >= FLOOR_MS["cuda"]:
        return (f"faster than this hardware allows: a call took no measurable time, and the roofline says no solution can take "
                f"less than {bound_ms:.4f} ms")
    return None
