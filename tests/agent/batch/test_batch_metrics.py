"""pass@k, fast_p, the geometric mean, per-category and per-step numbers of a batch, checked
against values worked out by hand for a fixed set of results; ties said, not ranked."""

import math

import pytest

from agent.batch.metrics import bootstrap, core_metrics, leaderboard, pass_at_k, problem_comparisons, summarize
from tests.support.batch import hand_fixture, naive_pass_at_k, result


@pytest.mark.parametrize("n,c,k", [(1, 0, 1), (1, 1, 1), (3, 1, 1), (3, 1, 2), (5, 2, 3), (10, 3, 5), (10, 10, 4), (7, 0, 7)])
def test_pass_at_k_is_the_unbiased_estimator(n, c, k):
    assert pass_at_k(n, c, k) == pytest.approx(naive_pass_at_k(n, c, k))


def test_pass_at_k_refuses_impossible_counts():
    with pytest.raises(ValueError):
        pass_at_k(3, 4, 1)
    with pytest.raises(ValueError):
        pass_at_k(3, 1, 4)


def value(metric):
    return metric["value"]


def test_summary_matches_the_numbers_worked_out_by_hand():
    summary = summarize(hand_fixture(), samples=3, resamples=200)
    a = summary["models"]["a"]
    # p1: n=3, c=2; p2: n=3 scored (the infra try is out), c=1
    assert a["episodes"] == 7 and a["scored"] == 6 and a["correct"] == 3 and a["infra_failures"] == 1
    assert a["infra_by_class"] == {"infra:harness": 1} and a["problems"] == 2
    assert value(a["pass_at_k"]["1"]) == pytest.approx((2 / 3 + 1 / 3) / 2)
    assert value(a["pass_at_k"]["2"]) == pytest.approx((1 + 2 / 3) / 2)  # p1: 1 - C(1,2)/C(3,2) = 1; p2: 1 - C(2,2)/C(3,2)
    assert value(a["pass_at_k"]["3"]) == pytest.approx(1.0)
    assert value(a["correct_rate"]) == pytest.approx(0.5)
    assert value(a["fast_p"]["0"]) == pytest.approx(0.5)
    assert value(a["fast_p"]["1"]) == pytest.approx((1 / 3 + 1 / 3) / 2)  # 1.5x on p1 (0.9x is not faster), 2.5x on p2
    assert value(a["fast_p"]["1.5"]) == pytest.approx((0 + 1 / 3) / 2)  # 1.5 is not more than 1.5
    assert value(a["fast_p"]["2"]) == pytest.approx((0 + 1 / 3) / 2)
    assert value(a["fast_p_sure"]["1"]) == pytest.approx(1 / 3)  # 1.4 and 2.2 lower ends are above 1
    assert value(a["fast_p_sure"]["1.5"]) == pytest.approx(1 / 6)  # only 2.2 > 1.5
    assert value(a["fast_1_at_k"]["2"]) == pytest.approx(2 / 3)  # each problem: n=3, one fast: 1 - C(2,2)/C(3,2)
    assert value(a["geomean_speedup"]) == pytest.approx(1.5)  # (1.5 * 0.9 * 2.5) ** (1/3)
    assert a["geomean_speedup"]["episodes"] == 3
    assert a["per_step"] == [{"step": 1, "correct": pytest.approx(1 / 6), "fast_1": 0.0},
                             {"step": 2, "correct": pytest.approx(0.5), "fast_1": pytest.approx(1 / 3)}]
    assert value(a["per_category"]["collective"]["correct"]) == pytest.approx(2 / 3)
    assert value(a["per_category"]["tp"]["fast_1"]) == pytest.approx(1 / 3)
    assert a["spend"]["cost_usd"] == pytest.approx(0.51) and a["spend"]["model_calls"] == 11
    b = summary["models"]["b"]
    assert b["spend"]["episodes_without_price"] == 2 and value(b["pass_at_k"]["1"]) == pytest.approx(0.5)
    assert list(b["pass_at_k"]) == ["1"]  # one sample per problem: no pass@2


def test_intervals_hold_the_value_and_are_reproducible():
    summary = summarize(hand_fixture(), resamples=300, seed=1)
    again = summarize(hand_fixture(), resamples=300, seed=1)
    assert summary == again
    for metric in (summary["models"]["a"]["pass_at_k"]["1"], summary["models"]["a"]["fast_p"]["1"],
                   summary["models"]["a"]["geomean_speedup"]):
        low, high = metric["ci"]
        assert low <= metric["value"] <= high and low < high


def test_bootstrap_of_a_constant_is_a_point():
    groups = [[(True, 2.0, None)] * 3, [(True, 2.0, None)] * 2]
    cis = bootstrap(groups, lambda g: core_metrics(g, 2), resamples=50)
    assert cis["correct"] == [1.0, 1.0] and cis["geomean_speedup"] == [2.0, 2.0]


def test_overlapping_intervals_are_ties_not_ranks():
    results = [result("x", f"p{i}", s, "correct" if (i + s) % 2 else "failed", 1.3 if (i + s) % 2 else None, steps=[("correct", 1.3)])
               for i in range(4) for s in range(2)]
    results += [result("y", f"p{i}", s, "correct" if (i + s) % 3 else "failed", 1.2 if (i + s) % 3 else None, steps=[("correct", 1.2)])
                for i in range(4) for s in range(2)]
    results += [result("z", f"p{i}", s) for i in range(4) for s in range(2)]  # never correct
    board = {row["model"]: row for row in leaderboard(summarize(results, resamples=300)["models"])}
    assert board["x"]["rank"] == board["y"]["rank"] == 1 and "y" in board["x"]["tied_with"]
    assert board["z"]["rank"] == 3 and board["z"]["tied_with"] == []


def test_per_problem_leader_is_tied_when_timing_intervals_overlap():
    results = [result("fast", "p", 0, "correct", 1.30, [1.2, 1.4], [("correct", 1.30)]),
               result("close", "p", 0, "correct", 1.25, [1.15, 1.35], [("correct", 1.25)]),
               result("slow", "p", 0, "correct", 0.8, [0.75, 0.85], [("correct", 0.8)]),
               result("fast", "q", 0, "correct", 3.0, [2.9, 3.1], [("correct", 3.0)]),
               result("close", "q", 0, "correct", 1.0, [0.9, 1.1], [("correct", 1.0)])]
    table = problem_comparisons(results)
    assert table["p"]["leader"] == "fast" and table["p"]["tied_with_leader"] == ["close"]
    assert table["q"]["leader"] == "fast" and table["q"]["tied_with_leader"] == []


def test_untimed_correct_answers_count_as_correct_but_never_as_fast():
    results = [result("e", "p", 0, "correct", None, None, [("correct", None)])]
    m = summarize(results, resamples=20)["models"]["e"]
    assert value(m["fast_p"]["0"]) == 1.0 and value(m["fast_p"]["1"]) == 0.0 and m["untimed_correct"] == 1
    assert m["geomean_speedup"]["value"] is None


def test_geomean_is_taken_in_log_space():
    results = [result("g", "p", 0, "correct", 4.0, None, [("correct", 4.0)]), result("g", "q", 0, "correct", 0.25, None, [("correct", 0.25)])]
    assert math.isclose(summarize(results, resamples=10)["models"]["g"]["geomean_speedup"]["value"], 1.0)
