"""Verdicts on pre-registered targets: met / within error / missed from a one-sided 95 % Wilson bound."""
import math

import pytest

from services.study.evidence import (
    Z_ONE_SIDED_95,
    describe,
    describe_difference,
    difference,
    judge,
    passes,
    wilson_bounds,
)


def test_wilson_bounds_match_the_closed_form_at_zero_and_all():
    z2 = Z_ONE_SIDED_95 ** 2
    low, high = wilson_bounds(0, 10)
    assert low == 0.0
    assert high == pytest.approx(z2 / (10 + z2), abs=1e-12)
    low, high = wilson_bounds(10, 10)
    assert high == pytest.approx(1.0)
    assert low == pytest.approx(10 / (10 + z2), abs=1e-12)


def test_wilson_bounds_of_a_textbook_case():
    # 81 of 263 (Newcombe 1998, Table I): two-sided 95 % Wilson interval 0.2553 to 0.3662
    low, high = wilson_bounds(81, 263, z=1.959963984540054)
    assert (low, high) == pytest.approx((0.2553, 0.3662), abs=5e-4)


@pytest.mark.parametrize("n", [0, -1])
def test_wilson_needs_observations(n):
    with pytest.raises(ValueError):
        wilson_bounds(0, n)


def test_met_when_the_point_estimate_is_on_the_right_side():
    v = judge("T2 relevant", 60, 100, 0.5)
    assert v.verdict == "met" and v.ok
    assert v.estimate == 0.6 and v.low < 0.6 < v.high


def test_within_error_when_only_the_interval_reaches_the_target():
    v = judge("T2 relevant", 45, 100, 0.5)
    assert v.verdict == "within_error" and v.ok
    assert v.high >= 0.5 > v.estimate


def test_missed_when_the_whole_interval_is_on_the_wrong_side():
    v = judge("T2 relevant", 30, 100, 0.5)
    assert v.verdict == "missed" and not v.ok
    assert v.high < 0.5


def test_a_bound_missed_by_one_item_is_within_error_not_missed():
    # the tenth round's blind English T3: 7 of 213 unrelated candidates recalled against a 3 % bound (6 allowed)
    v = judge("T3 unrelated", 7, 213, 0.03, "at_most")
    assert v.estimate > 0.03
    assert v.verdict == "within_error"
    # the same rate with far more data is a real miss
    assert judge("T3 unrelated", 70, 1000, 0.03, "at_most").verdict == "missed"
    assert judge("T3 unrelated", 6, 213, 0.03, "at_most").verdict == "met"


def test_an_upper_bound_missed_outright():
    v = judge("controls", 10, 40, 0.05, "at_most")
    assert v.verdict == "missed" and v.low > 0.05


def test_no_data_is_not_a_pass():
    v = judge("T4 relevant", 0, 0, 0.05)
    assert v.verdict == "no_data" and not v.ok
    assert not passes([v])


def test_bad_targets_are_refused():
    with pytest.raises(ValueError):
        judge("x", 1, 2, 50)
    with pytest.raises(ValueError):
        judge("x", 1, 2, 0.5, "above")  # type: ignore[arg-type]


def test_decay_shape_needs_t2_above_t4_by_more_than_its_error():
    clear = difference("T2-T4", (30, 50), (5, 50))
    assert clear.above and clear.low > 0
    assert clear.estimate == pytest.approx(0.5)
    close = difference("T2-T4", (6, 12), (4, 12))
    assert not close.above and close.low < 0 < close.estimate
    assert not difference("T2-T4", (3, 5), (0, 0)).above


def test_newcombe_interval_of_a_textbook_case():
    # Newcombe 1998 example: 56/70 vs 48/80, method 10, 95 % two-sided: 0.0524 to 0.3339
    d = difference("x", (56, 70), (48, 80), z=1.959963984540054)
    assert (d.low, d.high) == pytest.approx((0.0524, 0.3339), abs=5e-4)


def test_the_check_passes_only_without_a_miss_and_with_the_shape():
    ok = [judge("a", 60, 100, 0.5), judge("b", 45, 100, 0.5)]
    shape = [difference("T2-T4", (60, 100), (10, 100))]
    assert passes(ok, shape)
    assert not passes(ok + [judge("c", 30, 100, 0.5)], shape)
    assert not passes(ok, [difference("T2-T4", (6, 12), (4, 12))])
    assert math.isclose(ok[0].as_dict()["estimate"], 0.6)


# -- the lines, worded by the catalogs -----------------------------------------------------------------------------


def test_a_target_line_in_english_and_in_chinese_with_the_same_figures():
    verdict = judge("zh T3 relevant recalled", 9, 64, 0.15)
    assert describe(verdict, "en") == (
        "zh T3 relevant recalled: 14.1% (9/64; 95% one-sided 8.4%–22.7%; target ≥ 15%) — within error")
    assert describe(verdict, "zh") == (
        "zh T3 relevant recalled：14.1%（9/64；单侧 95% 区间 8.4%–22.7%；目标 ≥ 15%）— 在误差范围内")
    assert describe(judge("en T2 probe hit", 0, 0, 0.5), "zh") == "en T2 probe hit：无数据"


def test_a_difference_line_in_both_languages_says_whether_it_holds():
    shape = difference("zh T2 above T4", (20, 40), (18, 40))
    english, chinese = describe_difference(shape, "en"), describe_difference(shape.as_dict(), "zh")
    assert english.startswith("zh T2 above T4: +5.0% (20/40 vs 18/40; 95% one-sided lower bound -")
    assert english.endswith("— NOT above zero by more than its error")
    assert chinese.startswith("zh T2 above T4：+5.0%（20/40 对 18/40；单侧 95% 下界 -")
    assert chinese.endswith("— 未能在误差范围之外高于零")
    assert describe_difference(difference("T2 above T4", (0, 0), (3, 9)), "zh") == "T2 above T4：无数据"
    assert describe_difference(difference("T2 above T4", (0, 0), (3, 9))) == "T2 above T4: no data"
