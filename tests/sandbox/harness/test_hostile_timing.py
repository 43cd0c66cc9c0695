"""Timing claims from a hostile rank, at the level of the numbers (sandbox/harness/timing.py): the
end-to-end fixtures (tests/fixtures/hostile/timed_claims_zero.py and friends) depend on how noisy
the machine is; these do not."""

import random

import pytest

from sandbox.harness import timing


def _series(claims, walls, overhead=0.01, rounds=4):
    series = timing.Series([overhead, overhead])
    per = len(claims) // rounds
    for r in range(rounds):
        record = timing.Round(stage_ms=1.0)
        for claim, wall in list(zip(claims, walls))[r * per:(r + 1) * per]:
            record.claimed_ms.append([claim, claim])
            record.wall_ms.append(wall)
        series.rounds.append(record)
    return series


def _noisy_reference(true_ms, noise_ms, n=48, seed=1):
    rng = random.Random(seed)
    walls = [true_ms + 2.0 + rng.uniform(0, noise_ms) for _ in range(n)]
    return _series([true_ms] * n, walls)


def test_a_claim_below_the_clock_reads_as_the_clock_estimate_not_its_lower_bound():
    """A rank that claims a sliver of what it took, on a machine noisy enough that the claim
    passes: it used to be reported at the clock's 3-standard-error lower bound (so that
    ref / bound was a speedup without limit); now at the clock's estimate."""
    reference = _noisy_reference(true_ms=5.0, noise_ms=12.0)
    rng = random.Random(2)
    liar = _series([2.5] * 48, [5.0 + 2.0 + rng.uniform(0, 12.0) for _ in range(48)])  # took 5 ms, claims 2.5
    check = timing.check_clock(liar, reference, "cpu")  # passes: the noise hides the lie
    claimed = timing.statistics.median(liar.steps())
    assert claimed < check.clock_floor_ms < check.clock_estimate_ms, check
    reported, note = timing.reported_ms(claimed, check)
    assert reported == check.clock_estimate_ms and "less than the harness's clock allows" in note
    reference_ms = timing.statistics.median(reference.steps())
    assert check.clock_floor_ms >= timing.CLOCK_SHARE_FLOOR["cpu"] * check.clock_estimate_ms  # not the lower bound: 1.7x of equal work
    assert reference_ms / reported < 1.0  # equal work, read on the parent's clock


def test_a_claim_of_nothing_on_a_host_noisier_than_the_call_reads_near_the_clock():
    """On a host so loaded that three standard errors of the reference's unaccounted time exceed a
    call's whole estimate, the clock's lower bound was zero and any claim stood: in CI on 2026-12-06
    tests/fixtures/hostile/pause_defeated_by_vfork.py (0.01 ms a call claimed) read 18073x, correct.
    On the host CPU the floor is now a share of the clock's estimate (CLOCK_SHARE_FLOOR)."""
    reference = _noisy_reference(true_ms=20.0, noise_ms=150.0)
    rng = random.Random(101)
    liar = _series([0.01] * 48, [20.0 + 2.0 + rng.uniform(0, 150.0) for _ in range(48)])  # took 20 ms, claims 0.01
    check = timing.check_clock(liar, reference, "cpu")
    noise = timing.CONFIDENCE * timing._difference_error(reference.unclaimed(), 48) + timing.FLOOR_MS["cpu"]
    assert 0 < check.clock_estimate_ms < noise  # the lower bound, estimate less its noise: nothing
    reported, note = timing.reported_ms(0.01, check)
    assert reported >= timing.CLOCK_SHARE_FLOOR["cpu"] * check.clock_estimate_ms and "clock" in note
    assert timing.statistics.median(reference.steps()) / reported < 2.0  # equal work: no speedup of thousands
    quieter = _noisy_reference(true_ms=20.0, noise_ms=10.0)  # the control: an honest claim where the noise is half the call
    honest = _series([20.0] * 48, [20.0 + 2.0 + rng.uniform(0, 10.0) for _ in range(48)])
    assert timing.reported_ms(20.0, timing.check_clock(honest, quieter, "cpu")) == (20.0, None)


def test_no_claim_stands_where_the_clock_resolves_nothing():
    """Where the harness's own cost of a call varies by more than the whole call, the clock's
    estimate can fall to zero or below, and with it every floor: a claim of 0.01 ms for a 20 ms call
    stood (2000x). Now nothing is reported as verified there; the control, an honest claim on the
    same reference, fares alike: the clock cannot tell them apart."""
    reference = _noisy_reference(true_ms=20.0, noise_ms=300.0)
    rng = random.Random(7)
    walls = [20.0 + 2.0 + rng.uniform(0, 100.0) for _ in range(48)]
    liar, honest = _series([0.01] * 48, walls), _series([20.0] * 48, walls)
    check = timing.check_clock(liar, reference, "cpu")
    assert check.clock_estimate_ms <= 0 and check.clock_floor_ms == 0
    reported, note = timing.reported_ms(0.01, check)
    assert reported is None and "could not resolve" in note
    assert timing.reported_ms(20.0, timing.check_clock(honest, reference, "cpu"))[0] is None
    quieter = _noisy_reference(true_ms=20.0, noise_ms=10.0)  # where the clock resolves the call, an honest claim stands
    honest = _series([20.0] * 48, [20.0 + 2.0 + rng.uniform(0, 10.0) for _ in range(48)])
    assert timing.reported_ms(20.0, timing.check_clock(honest, quieter, "cpu")) == (20.0, None)


def test_an_honest_claim_is_reported_as_claimed():
    reference = _noisy_reference(true_ms=5.0, noise_ms=1.0)
    honest = _noisy_reference(true_ms=5.0, noise_ms=1.0, seed=3)
    check = timing.check_clock(honest, reference, "cpu")
    claimed = timing.statistics.median(honest.steps())
    assert timing.reported_ms(claimed, check) == (claimed, None)


def test_claiming_more_time_than_passed_is_rejected():
    reference = _noisy_reference(true_ms=5.0, noise_ms=1.0)
    greedy = _series([50.0] * 48, [8.0] * 48)
    try:
        timing.check_clock(greedy, reference, "cpu")
    except timing.TimingRejected as rejected:
        assert "only" in str(rejected) and "passed" in str(rejected)
    else:
        raise AssertionError("a claim beyond the parent's clock was accepted")


def test_claiming_nothing_on_a_quiet_machine_is_rejected():
    reference = _noisy_reference(true_ms=5.0, noise_ms=0.5)
    liar = _series([0.0] * 48, [7.0 + 0.5 * (i % 5) / 5 for i in range(48)])
    try:
        timing.check_clock(liar, reference, "cpu")
    except timing.TimingRejected as rejected:
        assert "disagrees" in str(rejected)
    else:
        raise AssertionError("a zero claim for a 5 ms call was accepted")


def _calibration(harness_ms, noise_ms, n=12, seed=5):
    """Harness-only calls (an empty timed interval) of one group, as the parent times them before load."""
    rng = random.Random(seed)
    return _series([0.0] * n, [harness_ms + rng.uniform(0, noise_ms) for _ in range(n)], rounds=1)


def test_a_candidate_in_slower_processes_is_not_read_as_hiding_work():
    """On the H200 the harness's own work in a call cost 4.5 ms more in an honest candidate's
    processes than in the reference's, with a quiet reference: rejected as hiding work, until the
    calibration (the same harness work in both groups, before any candidate code ran) took the
    difference out."""
    reference = _noisy_reference(true_ms=0.4, noise_ms=0.5)
    rng = random.Random(7)
    honest = _series([0.4] * 48, [0.4 + 2.0 + 4.5 + rng.uniform(0, 0.5) for _ in range(48)])
    try:
        timing.check_clock(honest, reference, "cuda")
    except timing.TimingRejected as rejected:
        assert "disagrees" in str(rejected)
    else:
        raise AssertionError("without calibration the slower processes should read as hidden work")
    check = timing.check_clock(honest, reference, "cuda", _calibration(2.0 + 4.5, 0.5), _calibration(2.0, 0.5, seed=6))
    assert 4.0 < check.harness_offset_ms < 4.6, check
    assert timing.reported_ms(timing.statistics.median(honest.steps()), check)[1] is None  # reported as claimed


def test_a_calibration_never_widens_the_tolerance_for_hidden_work():
    """Candidate processes that are faster, or a calibration too noisy to say, give no credit:
    hidden work is judged as without a calibration."""
    reference = _noisy_reference(true_ms=5.0, noise_ms=0.5)
    liar = _series([0.0] * 48, [7.0 + 0.5 * (i % 5) / 5 for i in range(48)])
    for candidate_cal, reference_cal in ((_calibration(1.0, 0.5), _calibration(2.0, 0.5)),  # faster processes
                                         (_calibration(2.0, 30.0), _calibration(2.0, 30.0, seed=9))):  # noise
        try:
            check = timing.check_clock(liar, reference, "cuda", candidate_cal, reference_cal)
        except timing.TimingRejected as rejected:
            assert "disagrees" in str(rejected)
        else:
            raise AssertionError(f"hidden work passed with offset {check.harness_offset_ms}")


def test_processes_surely_faster_at_the_harness_work_take_nothing_off_the_clock():
    """The calibration showed the candidate's processes 0.3 ms a call quicker at the harness's own
    work than the reference's. A candidate that hides 0.4 ms of work after its timer and claims
    0.02 ms read 2.4x on the clock before (the clock's estimate was low by what its processes saved);
    now it reads as slower than the reference, or is rejected. Control: an honest 0.15 ms call in
    such processes got no speedup before (the clock's estimate fell below zero) and reads its 2x now."""
    rng = random.Random(3)

    def group(claim_ms, harness_ms):
        return _series([claim_ms] * 48, [claim_ms + harness_ms + rng.uniform(0, 0.05) for _ in range(48)])

    reference = group(0.3, 1.0)
    calibrations = _calibration(0.7, 0.05), _calibration(1.0, 0.05, seed=6)

    def speedup(candidate):
        check = timing.check_clock(candidate, reference, "cuda", *calibrations)
        reported, _ = timing.reported_ms(timing.statistics.median(candidate.steps()), check)
        return None if reported is None else timing.statistics.median(reference.steps()) / reported

    liar = group(0.02, 0.7 + 0.4)
    try:
        read = speedup(liar)
    except timing.TimingRejected as rejected:
        assert "disagrees" in str(rejected)
    else:
        assert read is not None and read < 1.0, read
    assert speedup(group(0.15, 0.7)) == pytest.approx(2.0, rel=0.1)


def test_the_interval_qualifies_the_speedup_reported():
    """When the candidate is read on the parent's clock (its claims were too small) or the reference
    is taken alone, the interval moves with the number reported: a run on a loaded box read
    0.56x with an interval of 0.62-1.24 before."""
    rng = random.Random(4)
    reference, candidate = ((lambda claims: _series(claims, [c + 2.0 for c in claims]))([5.0 + rng.uniform(0, 1.0) for _ in range(48)])
                            for _ in range(2))
    low, high = timing.speedup_interval(reference, candidate)
    assert low < 1.0 < high
    scaled = timing.speedup_interval(reference, candidate, reported=0.5)
    claims = timing.statistics.median(reference.steps()) / timing.statistics.median(candidate.steps())
    assert scaled == pytest.approx((low * 0.5 / claims, high * 0.5 / claims)) and scaled[0] < 0.5 < scaled[1]


def test_a_ranks_words_render_inert():
    """What a rank says reaches the terminal through the verdict: no escape sequence, no markup
    (tests/fixtures/hostile/log_flood_and_escapes.py end to end)."""
    import io

    from rich.console import Console

    from agent.render import print_report, step_line
    from sandbox.report import EvalReport, RankVerdict, inert

    nasty = "\x1b[2J\x1b]52;c;cHduZWQ=\x07[bold red]markup[/bold red] [link=http://evil.example]x[/link]"
    report = EvalReport(status="crashed", message=f"rank 0 crashed: {inert(nasty)}", problem="all_reduce", world=2, device="cpu",
                        dtype="bfloat16", size="small", ranks=[RankVerdict(rank=0, ok=False, message=inert(nasty))])
    buffer = io.StringIO()
    console = Console(file=buffer, force_terminal=False, color_system=None, width=300)
    print_report(report, console)
    console.print(step_line({"step": 1, "status": "crashed", "speedup": None, "tokens": 0, "cost_usd": 0.0, "wall_s": 1.0,
                             "message": nasty}, 2), highlight=False)
    shown = buffer.getvalue()
    assert "\x1b" not in shown and "\x07" not in shown
    assert shown.count("[bold red]markup[/bold red]") == 3  # shown as written, in the message, the rank table and the step line


def test_a_reference_slowed_beside_the_candidate_is_told_from_noise():
    """The speedup is taken against the reference alone only when it ran slower beside the
    candidate beyond the two samples' errors: on the H200 an honest candidate's reference read
    1.32x slower beside it than in one round of 4 calls alone, and that job's speedup dropped
    from about 0.7x to 0.54x (a 1.39x spread over 5 jobs)."""
    rng = random.Random(11)
    alone_few = [0.30 + rng.uniform(-0.03, 0.03) for _ in range(4)]
    beside = [0.36 + rng.uniform(-0.09, 0.09) for _ in range(16)]
    assert timing.statistics.median(beside) > 1.1 * timing.statistics.median(alone_few)
    assert not timing.slowed(beside, [0.33 + rng.uniform(-0.09, 0.09) for _ in range(16)], 1.25)
    spun = [13.0 * 0.35 + rng.uniform(-0.1, 0.1) for _ in range(16)]  # tests/fixtures/hostile/cuda_spin_during_reference.py
    assert timing.slowed(spun, [0.35 + rng.uniform(-0.09, 0.09) for _ in range(16)], 1.25)
    assert not timing.slowed([], [0.3], 1.25)


def _noisy(noise, n, seed):
    rng = random.Random(seed)
    claims = [1.0 + rng.uniform(-noise, noise) for _ in range(n)]
    return _series(claims, [c + 2.0 for c in claims], rounds=n // 4)  # the pipeline adds rounds of 4 calls


def test_the_interval_narrows_with_the_calls():
    """Claims uniform in 0.4-1.6 ms: each median of 16 has a standard error near 0.15 ms, so the
    ratio's 95% half-width is near 0.4 (4 rounds resampled whole read 0.14); 25x the calls give
    about a fifth of it, the square-root law the stop rule projects with."""
    low, high = timing.speedup_interval(_noisy(0.6, 16, 1), _noisy(0.6, 16, 2))
    wide = (high - low) / 2
    assert wide > 0.25, wide
    low, high = timing.speedup_interval(_noisy(0.6, 400, 1), _noisy(0.6, 400, 2))
    assert 0.04 < (high - low) / 2 < wide / 3
    assert timing.relative_half_width(_noisy(0.6, 16, 1), _noisy(0.6, 16, 2)) > 0.25
    assert timing.relative_half_width(_noisy(0.01, 16, 1), _noisy(0.01, 16, 2)) < 0.03


@pytest.mark.parametrize("noise, calls, precision, stop", [
    (0.01, 16, 0.03, "precise enough"),  # steady: precise at the planned calls
    (0.6, 16, 0.0, "precise enough"),  # no precision asked: the planned calls
    (0.6, 8, 0.0, None),  # ...but never fewer
    (0.6, 16, 0.03, "so timing stopped there"),  # +-40% at 16 calls: +-20% at 64, out of reach of 3%
    (0.6, 16, 0.2, None),  # +-40% at 16: about +-20% at 64, within reach of 20%: time on
    (0.6, 64, 0.2, "the call limit was reached"),
])
def test_timing_goes_on_only_while_more_calls_may_make_the_speedup_precise(noise, calls, precision, stop):
    reason = timing.stop_reason(_noisy(noise, calls, 1), _noisy(noise, calls, 2), precision, target=16, most=64, late=False)
    assert (reason is None) if stop is None else (stop in reason), reason


def test_the_timing_budget_ends_timing_past_ten_calls():
    noisy = _noisy(0.6, 12, 1), _noisy(0.6, 12, 2)
    assert "budget ran out" in timing.stop_reason(*noisy, 0.03, target=16, most=64, late=True)
    assert timing.stop_reason(_noisy(0.6, 4, 1), _noisy(0.6, 4, 2), 0.03, target=16, most=64, late=True) is None


def test_many_calls_do_not_turn_a_process_difference_into_hidden_work():
    """On the H200 (64 MB calls, 22 ms of harness work in each) an honest candidate's processes
    took 1.9 ms a call more than the reference's after calibration; timed over 60 calls instead of
    16, the standard error no longer covered that and the honest candidate was rejected. A share
    of the harness's own cost is allowed on top; hidden work beyond it is still rejected. The
    allowance is never taken off the clock's floor: the honest candidate is then read on the
    clock (slower than it claims), a price paid so that a liar inside the allowance gains nothing."""
    rng = random.Random(12)
    reference = _series([0.35] * 60, [0.35 + 22.0 + rng.uniform(0, 0.5) for _ in range(60)], rounds=15)
    honest = _series([0.38] * 60, [0.38 + 22.0 + 1.9 + rng.uniform(0, 0.5) for _ in range(60)], rounds=15)
    check = timing.check_clock(honest, reference, "cuda", _calibration(22.0, 0.5), _calibration(22.0, 0.5, seed=6))
    reported, _ = timing.reported_ms(timing.statistics.median(honest.steps()), check)
    assert reported >= 0.38
    liar = _series([0.02] * 60, [0.02 + 22.0 + 1.9 + rng.uniform(0, 0.5) for _ in range(60)], rounds=15)  # hides 0.36 ms
    check = timing.check_clock(liar, reference, "cuda", _calibration(22.0, 0.5), _calibration(22.0, 0.5, seed=6))
    assert timing.reported_ms(0.02, check)[0] > 0.35  # read on the clock: no unearned speedup
    hiding = _series([0.02] * 60, [0.02 + 22.0 + 6.0 + rng.uniform(0, 0.5) for _ in range(60)], rounds=15)
    try:
        timing.check_clock(hiding, reference, "cuda", _calibration(22.0, 0.5), _calibration(22.0, 0.5, seed=6))
    except timing.TimingRejected as rejected:
        assert "disagrees" in str(rejected)
    else:
        raise AssertionError("6 ms of hidden work a call passed")


def test_a_timing_let_through_by_the_process_allowance_is_read_on_the_clock():
    """On a loaded two-core host an honest group of processes left up to 0.8 ms a call more
    unaccounted than the reference's 1.3 ms, for a whole timing; the CPU allows the reference's
    unaccounted time again on top of the noise. What that allowance lets through is not taken at
    its word: a rank hiding 0.6 ms a call after its timer reads at the clock's estimate (a CPU
    work_after_timer read 2.8x on its claims), and staging time beyond the noise is charged too."""
    rng = random.Random(21)
    reference = _series([0.6] * 24, [0.6 + 1.3 + rng.uniform(0, 0.1) for _ in range(24)])
    liar = _series([0.05] * 24, [0.65 + 1.3 + rng.uniform(0, 0.1) for _ in range(24)])  # took 0.65 ms, claims 0.05
    check = timing.check_clock(liar, reference, "cpu")  # passes: within the allowance for process groups
    reported, note = timing.reported_ms(0.05, check)
    assert reported >= 0.55 and note and "clock" in note, (reported, check)
    honest = _series([0.6] * 24, [0.6 + 1.3 + rng.uniform(0, 0.1) for _ in range(24)])  # control: within the noise
    assert timing.reported_ms(0.6, timing.check_clock(honest, reference, "cpu")) == (0.6, None)
    with pytest.raises(timing.TimingRejected, match="disagrees"):  # hiding more than the allowance: rejected
        timing.check_clock(_series([0.05] * 24, [2.0 + 1.3 + rng.uniform(0, 0.1) for _ in range(24)]), reference, "cpu")
    precomputing = _series([0.05] * 24, [0.05 + 1.3 + rng.uniform(0, 0.1) for _ in range(24)])
    for record in precomputing.rounds:  # 0.2 ms a call of work moved into staging (6 calls a round): within the allowance
        record.stage_ms = 1.0 + 6 * 0.2
    check = timing.check_clock(precomputing, reference, "cpu")
    reported, note = timing.reported_ms(0.05, check)
    assert reported >= 0.2, check
    assert "of staging beyond the reference's" in note, note  # the report says what was charged, and why


def test_a_reference_slowed_beside_the_candidate_does_not_lower_the_clocks_floor():
    """Work a candidate leaves running inflates the reference's harness cost beside it (5 ms a call
    against 2 ms alone); its own calls take 1 ms of work and claim 0.01 ms. Against the inflated
    yardstick the claim stood (a speedup near 100x); against the reference alone it reads 1 ms."""
    rng = random.Random(3)
    beside = _series([1.0] * 48, [1.0 + 5.0 + rng.uniform(0, 0.05) for _ in range(48)])
    alone = _series([1.0] * 48, [1.0 + 2.0 + rng.uniform(0, 0.05) for _ in range(48)])
    liar = _series([0.01] * 48, [1.0 + 2.0 + rng.uniform(0, 0.05) for _ in range(48)])
    fooled = timing.check_clock(liar, beside, "cpu")
    assert fooled.clock_estimate_ms < 0.1  # the old yardstick bounds nothing: the claim stood, or nothing is verified
    check = timing.check_clock(liar, beside, "cpu", reference_alone=alone)
    assert timing.reported_ms(0.01, check)[0] == pytest.approx(1.0, abs=0.1)
    honest = _series([1.0] * 48, [1.0 + 2.0 + rng.uniform(0, 0.05) for _ in range(48)])  # the control: read as claimed
    assert timing.reported_ms(1.0, timing.check_clock(honest, beside, "cpu", reference_alone=alone)) == (1.0, None)


# per-round staging ms a call of the reference, all_reduce at 128 MB, cuda world 1, on the H200 (2026-12-02)
H200_REFERENCE_STAGING_MS = [15.52, 14.05, 12.91, 14.93, 11.75, 13.77, 13.68, 11.9, 11.55, 14.93, 12.58, 12.75, 14.43, 15.15, 12.78]


def _staged(claim_ms, wall_ms, staging_ms, seed, rounds=15):
    rng = random.Random(seed)
    series = _series([claim_ms] * 4 * rounds, [wall_ms + rng.uniform(0, 0.5) for _ in range(4 * rounds)], rounds=rounds)
    for record, ms in zip(series.rounds, staging_ms):
        record.stage_ms = ms * len(record.wall_ms)
    return series


def test_an_honest_candidate_in_slower_staging_processes_is_charged_not_rejected():
    """On the H200 the reference as its own candidate staged its inputs 1.21x slower than the
    reference did, in both timings of an evaluation (13.9 against 11.4 ms a call): rejected as
    precomputing during staging. Now what is beyond the noise is charged to its time; work moved
    into staging beyond the allowance for process groups is still rejected."""
    reference = _staged(0.27, 0.27 + 20.0, H200_REFERENCE_STAGING_MS, seed=1)
    calibration = _calibration(20.0, 0.5), _calibration(20.0, 0.5, seed=6)
    slower = _staged(0.45, 0.45 + 20.0, [ms * 1.21 for ms in H200_REFERENCE_STAGING_MS], seed=2)
    check = timing.check_clock(slower, reference, "cuda", *calibration)  # rejected before: allowed 0.4 ms more
    extra = check.candidate_staging_ms - check.reference_staging_ms
    assert extra > 2.0, check
    reported, note = timing.reported_ms(0.45, check)
    assert reported > 0.45 + extra / 2 and note, (reported, check)  # the staging nothing explains counts as its time
    same = _staged(0.45, 0.45 + 20.0, H200_REFERENCE_STAGING_MS[::-1], seed=3)  # control: staged as the reference did
    assert timing.reported_ms(0.45, timing.check_clock(same, reference, "cuda", *calibration)) == (0.45, None)
    hiding = _staged(0.01, 0.01 + 20.0, [ms + 3.5 for ms in H200_REFERENCE_STAGING_MS], seed=5)  # 3.5 ms a call moved
    check = timing.check_clock(hiding, reference, "cuda", *calibration)  # into staging: inside the allowance, and charged
    assert timing.reported_ms(0.01, check)[0] >= 3.0, check
    precomputing = _staged(0.01, 0.01 + 20.0, [ms * 1.5 for ms in H200_REFERENCE_STAGING_MS], seed=4)
    with pytest.raises(timing.TimingRejected, match="staging"):
        timing.check_clock(precomputing, reference, "cuda", *calibration)


def test_work_moved_into_staging_under_a_noisy_reference_is_charged_on_the_cpu():
    """On a loaded two-core host the reference's staging varied 0.3-1.1 ms a call over 4 rounds,
    and precompute_at_stage's 1.7 ms a call moved into staging fitted in the noise: its claims of
    0.003 ms stood, 1154x, correct. On the CPU the staging beyond the reference's is now charged
    where the noise could hide more than the call claims; a candidate that stages as the reference
    does is not charged."""
    noisy_staging = [0.2, 0.5, 0.9, 1.4]
    reference = _staged(0.6, 0.6 + 0.4, noisy_staging, seed=1, rounds=4)
    for device in ("cpu", "cuda"):
        hiding = _staged(0.003, 0.003 + 0.45, [ms + 1.3 for ms in noisy_staging[::-1]], seed=2, rounds=4)
        check = timing.check_clock(hiding, reference, device)
        reported, note = timing.reported_ms(0.003, check)
        if device == "cpu":
            assert reported > 0.8 and "staging" in note, (reported, check)
        else:  # a GPU's staging noise, and what charging it would cost honest calls, are not measured: unchanged there
            assert reported < 0.6, (reported, check)
    same = _staged(0.6, 0.6 + 0.4, noisy_staging[::-1], seed=3, rounds=4)  # control: staged as the reference did
    assert timing.reported_ms(0.6, timing.check_clock(same, reference, "cpu")) == (0.6, None)


def test_claims_of_zero_give_no_interval_rather_than_nan():
    """A candidate that claims zero time (hostile timed_claims_zero) is read on the parent's clock;
    its claims give no interval, which is None (no interval is reported, and a note says why), not
    [nan, nan] in the report as on the H200 before."""
    reference = _series([0.5] * 16, [2.5] * 16)
    candidate = _series([0.0] * 16, [2.4] * 16)
    assert timing.speedup_interval(reference, candidate) is None
    assert "precise enough" in timing.stop_reason(reference, candidate, 0.03, target=16, most=64, late=False)


def test_an_inflated_start_up_interval_takes_nothing_from_the_calls():
    """On the H200 a candidate group measured its empty timed interval at 0.27 ms at start-up, the
    reference's group 0.013 ms: subtracted, an honest 0.066 ms copy read 0.0 ms and got no speedup.
    Both groups subtract the lesser measure: the call keeps its time, and the reference's is the
    same as with its own measure."""
    assert timing.empty_interval([0.013, 0.02], [0.27, 0.015]) == [0.013, 0.015]
    claims = [0.066 + 0.013] * 24
    own = timing.Series([0.27])
    shared = timing.Series(timing.empty_interval([0.013], [0.27]))
    for series in (own, shared):
        for r in range(4):
            series.rounds.append(timing.Round(claimed_ms=[[c] for c in claims[r * 6:(r + 1) * 6]], wall_ms=[4.0] * 6))
    assert timing.statistics.median(own.steps()) == 0.0  # what the candidate's own measure did
    assert timing.statistics.median(shared.steps()) == pytest.approx(0.066)
    with pytest.raises(ValueError):
        timing.empty_interval([0.01, 0.01], [0.01])  # groups of different sizes are a harness bug, not a minimum


def test_a_gpu_evaluation_takes_the_empty_interval_from_its_own_calibration():
    """On the H200 on 2026-12-06 the honest copy and the reference at all_reduce's latency size
    read no time beyond the empty interval their groups measured at start-up (the copy rejected as
    faster than the hardware, the reference's time alone 0.0 ms) where at a smaller size they read
    0.14 ms. Where an evaluation has a calibration (on a GPU: both groups' empty intervals just
    before the timing, before any candidate code), that is the interval taken off, the lesser of the
    two groups' medians per rank; without one (the host CPU), the start-up measures."""
    from types import SimpleNamespace

    from sandbox.harness.pipeline import Evaluation

    def calibration(ms, calls=12):
        series = timing.Series([])
        series.rounds.append(timing.Round(claimed_ms=[[ms[0] + 0.001 * (i % 3), ms[1]] for i in range(calls)], wall_ms=[1.0] * calls))
        return series

    def evaluation(calibrated: bool):
        made = object.__new__(Evaluation)
        made.reference, made.candidate = SimpleNamespace(overheads=[0.2, 0.19]), SimpleNamespace(overheads=[0.18, 0.21])
        made.reference_calibration = calibration([0.016, 0.015]) if calibrated else timing.Series([])
        made.candidate_calibration = calibration([0.015, 0.017]) if calibrated else timing.Series([])
        return made

    assert evaluation(True)._empty_interval_ms == pytest.approx([0.016, 0.015])
    assert evaluation(False)._empty_interval_ms == [0.18, 0.19]
    honest = timing.Round(claimed_ms=[[0.155, 0.154]] * 8, wall_ms=[1.2] * 8)  # a 0.14 ms call, its empty interval 0.015 ms
    assert timing.statistics.median(timing.Series(evaluation(True)._empty_interval_ms, [honest]).steps()) == pytest.approx(0.139)
    assert timing.statistics.median(timing.Series(evaluation(False)._empty_interval_ms, [honest]).steps()) == 0.0  # before


def _roofline(limiter, hbm_measured=False, bound_ms=0.028):
    from sandbox.report import Roofline

    return Roofline(bound_ms=bound_ms, limiter=limiter, comm_bytes_per_rank=0.0, flops_per_rank=0.0, hbm_bytes_per_rank=2 * 2**26,
                    link_gbps=450.0, hbm_gbps=4800.0, tflops=989.0, hbm_measured=hbm_measured)


@pytest.mark.parametrize("share", [1.12, 1.15, 1.47])  # what work hidden in staging or after the timer read on the H200
def test_a_call_beyond_a_datasheet_hbm_roofline_is_impossible(share):
    message = timing.faster_than_hardware(0.028 / share, _roofline("hbm"))
    assert message and "faster than this hardware allows" in message and "1.1x" in message


@pytest.mark.parametrize("limiter, measured", [("hbm", True), ("compute", False), ("interconnect", False)])
def test_a_roofline_of_measured_rates_or_other_limits_keeps_its_wider_margin(limiter, measured):
    """A measured copy rate, or a link or compute rate, is one a kernel may beat: 1.5x is allowed there."""
    assert timing.faster_than_hardware(0.028 / 1.3, _roofline(limiter, hbm_measured=measured)) is None
    assert timing.faster_than_hardware(0.028 / 1.6, _roofline(limiter, hbm_measured=measured))


def test_honest_shares_of_a_datasheet_hbm_roofline_stand():
    """The best an honest kernel read on the H200 (a bare clone, 43% in its fastest call) and the roofline itself."""
    for share in (0.29, 0.43, 1.0, 1.09):
        assert timing.faster_than_hardware(0.028 / share, _roofline("hbm")) is None
    assert timing.faster_than_hardware(0.0, _roofline("hbm"))


@pytest.mark.parametrize("device_ms,timed_ms,said", [(0.027, 0.2, True), (0.099, 0.2, True), (0.1, 0.2, False), (0.41, 0.45, False),
                                                      (None, 0.2, False), (0.027, None, False)])
def test_a_reference_mostly_the_hosts_work_is_said_so(device_ms, timed_ms, said):
    """The all_reduce reference at world 1 on an H100: 0.027 ms on the device, 0.08-0.23 ms timed
    (benchmarks/reference_call_noise.py --layouts): a report says its speedup moves with the host."""
    note = timing.host_bound_note(device_ms, timed_ms)
    assert (note is not None) == said
    if said:
        assert f"{device_ms:.4f} ms of its {timed_ms:.4f} ms ran on the device" in note


def test_a_call_that_measured_nothing_is_impossible_only_where_the_timer_resolves_the_bound():
    """On the H200 an honest copy of all_reduce's latency size (128 KiB at world 1, a bound of about
    0.00005 ms) measured nothing beyond the empty timed interval and was rejected as faster than
    the hardware; a claim of nothing against a bound the timer resolves still is."""
    tiny = _roofline("hbm", bound_ms=2 * 2**17 / 4800e9 * 1e3)
    assert timing.faster_than_hardware(0.0, tiny) is None
    assert timing.faster_than_hardware(-0.001, tiny) is None
    resolved = _roofline("hbm", bound_ms=timing.FLOOR_MS["cuda"] * timing.HBM_DATASHEET_MARGIN)
    assert "no measurable time" in timing.faster_than_hardware(0.0, resolved)
    assert timing.faster_than_hardware(tiny.bound_ms / 2, tiny)  # a measured time below the bound stays impossible


@pytest.mark.parametrize("empty_ms", [0.01, 0.18, 2.0])
def test_the_clock_estimate_is_net_of_the_empty_interval_as_the_claims_are(empty_ms):
    """The empty timed interval is taken off every claim (on a GPU the sync's 0.02-0.03 ms; 0.18 ms
    on an H100 with the launch behind a gate, an experiment since reverted). The clock's estimate
    took off the harness's unaccounted time only: an honest copy of the reference's own code read
    0.22x of it there, on the estimate. Here the reference and an honest candidate of the same
    0.05 ms call, each claim holding ``empty_ms`` more: the claim stands; a claim of nothing is
    still read on the clock, at about the call."""
    rng = random.Random(5)
    walls = [0.05 + empty_ms + 0.8 + rng.uniform(0, 0.02) for _ in range(48)]
    reference = _series([0.05 + empty_ms] * 48, walls, overhead=empty_ms)
    honest = _series([0.05 + empty_ms] * 48, [w + rng.uniform(-0.005, 0.005) for w in walls], overhead=empty_ms)
    check = timing.check_clock(honest, reference, "cuda")
    assert abs(check.clock_estimate_ms - 0.05) < 0.02, check
    assert timing.reported_ms(timing.statistics.median(honest.steps()), check) == (pytest.approx(0.05), None)
    liar = _series([empty_ms] * 48, [w for r in honest.rounds for w in r.wall_ms], overhead=empty_ms)
    lie = timing.check_clock(liar, reference, "cuda")  # within the allowance for process groups that differ...
    reported, note = timing.reported_ms(timing.statistics.median(liar.steps()), lie)
    assert abs(reported - 0.05) < 0.02 and "clock" in note  # ...so read on the clock's estimate: the call's own time
