"""services.recall.relevance: the logistic relevance model is a probability, rises with the fused score,
recovers known coefficients, and refuses models that would reward a worse match."""
from __future__ import annotations

import numpy as np
import pytest

from config import load_study
from services.recall import relevance as rel
from services.recall.parameters import resolve_recall_params


def test_sigmoid_is_stable_at_the_extremes():
    assert rel.sigmoid(np.array([-1000.0, 0.0, 1000.0])) == pytest.approx([0.0, 0.5, 1.0])


def test_fit_recovers_the_coefficients_of_simulated_data():
    rng = np.random.default_rng(7)
    x = rng.normal(size=(20000, 2))
    y = (rng.random(20000) < rel.sigmoid(-1.0 + 2.0 * x[:, 0] + 0.5 * x[:, 1])).astype(float)
    intercept, coef = rel.fit_logistic(x, y, l2=0.0)
    assert intercept == pytest.approx(-1.0, abs=0.08)
    assert coef == pytest.approx([2.0, 0.5], abs=0.08)


def test_fit_needs_both_labels():
    with pytest.raises(ValueError, match="both"):
        rel.fit_logistic(np.zeros((3, 1)), np.ones(3))


def test_a_feature_that_lowers_r_is_dropped_and_fused_is_held_at_its_floor():
    rng = np.random.default_rng(3)
    n = 5000
    dense = rng.normal(size=n)
    noise = rng.normal(size=n)
    y = (rng.random(n) < rel.sigmoid(2.0 * dense - 1.0 * noise)).astype(float)
    # "fused" carries nothing beyond dense; "lexical_z" lowers the odds: it is dropped, fused kept at its floor
    scores = {"fused": rng.normal(size=n) * 0.01, "dense_z": dense, "lexical_z": noise}
    model = rel.fit_monotone(scores, y, ("fused", "dense_z", "lexical_z"))
    assert model.features == ("fused", "dense_z")
    assert model.coef[0] == pytest.approx(rel.MIN_FUSED_COEF)
    assert model.coef[1] > 1.0  # attenuated from 2: the dropped feature mattered (with the wrong sign)


def test_models_that_would_not_rise_with_the_fused_score_are_refused():
    with pytest.raises(ValueError, match="rise"):
        rel.LogisticModel(("fused", "cosine"), 0.0, (-0.1, 1.0))
    with pytest.raises(ValueError, match="rise"):
        rel.LogisticModel(("fused", "cosine"), 0.0, (0.1, -1.0))
    with pytest.raises(ValueError, match="fused"):
        rel.LogisticModel(("cosine",), 0.0, (1.0,))
    with pytest.raises(ValueError, match="unknown"):
        rel.LogisticModel(("fused", "salience"), 0.0, (1.0, 1.0))


@pytest.mark.parametrize("language", ["zh", "en", None])
def test_the_calibrated_relevance_is_a_probability_monotone_in_the_fused_score(language):
    params = resolve_recall_params(load_study().memory.recall_config, preset="calibrated")
    assert params.relevance.method == "logistic"
    rng = np.random.default_rng(11)
    for _ in range(50):
        cosine = rng.uniform(0.7, 0.95)
        dense_z, lexical_z = rng.normal(size=2)
        fused = np.sort(rng.normal(scale=3.0, size=40))
        others = {"dense_z": np.full(40, dense_z), "lexical_z": np.full(40, lexical_z)}
        r = params.relevance.to_r(np.full(40, cosine), language, {"fused": fused, **others})
        assert np.all((r >= 0) & (r <= 1))
        assert np.all(np.diff(r) > 0)


def test_the_model_round_trips_through_the_study_definition():
    model = rel.LogisticRelevance(rel.LogisticModel(("fused", "cosine"), -3.0, (0.5, 2.0)),
                                  {"en": rel.LogisticModel(("fused",), -1.0, (1.0,))})
    assert rel.LogisticRelevance.from_dict(model.to_dict()) == model
    assert model.predict({"fused": 1.0}, "en") == pytest.approx(0.5)
    assert model.predict({"fused": 0.0, "cosine": 1.5}, "zh") == pytest.approx(0.5)
    with pytest.raises(ValueError, match="fitted 'model'"):
        resolve_recall_params(load_study().memory.recall_config,
                              overrides={"relevance": {"method": "logistic", "model": None}})


def test_the_exponential_tail_recovers_a_known_scale_and_its_quantile_is_the_budget():
    rng = np.random.default_rng(5)
    scores = rng.exponential(scale=0.8, size=40000) - 1.0
    tail = rel.fit_unrelated_tail(scores)
    assert tail.share == pytest.approx(0.2, abs=1e-3)
    assert tail.scale == pytest.approx(0.8, rel=0.03)
    for budget in (0.01, 0.02, 0.05):
        anchor = tail.quantile(budget)
        assert np.mean(scores > anchor) == pytest.approx(budget, rel=0.15)
        assert tail.exceedance(anchor) == pytest.approx(budget)
    with pytest.raises(ValueError, match="budget"):
        tail.quantile(0.25)  # outside the fitted tail
    with pytest.raises(ValueError, match="scale"):
        rel.UnrelatedTail(0.0, 0.2, 0.0)
    with pytest.raises(ValueError, match="at least 10"):
        rel.fit_unrelated_tail([0.1, 0.2])


def _gpd_sample(rng, size, scale, shape, location=0.0):
    """Generalised Pareto draws by the inverse CDF."""
    return location + scale / shape * (rng.random(size) ** -shape - 1.0)


@pytest.mark.parametrize("shape", [-0.3, -0.1, 0.2])
def test_the_generalised_pareto_fit_recovers_a_known_shape_and_its_quantile_is_the_budget(shape):
    rng = np.random.default_rng(11)
    scale, shape_hat = rel.fit_gpd(_gpd_sample(rng, 10000, 0.7, shape))
    assert shape_hat == pytest.approx(shape, abs=0.03)
    assert scale == pytest.approx(0.7, rel=0.05)
    # the whole score distribution generalised Pareto: its excess over the 80th percentile keeps the shape
    scores = _gpd_sample(rng, 20000, 0.7, shape, location=-1.0)
    tail = rel.fit_unrelated_tail(scores)
    assert tail.shape == pytest.approx(shape, abs=0.05)
    for budget in (0.01, 0.02, 0.05):
        anchor = tail.quantile(budget)
        assert np.mean(scores > anchor) == pytest.approx(budget, rel=0.15)
        assert tail.exceedance(anchor) == pytest.approx(budget)


def test_the_generalised_pareto_fit_keeps_the_exponential_when_the_data_are_exponential():
    scale, shape = rel.fit_gpd(np.random.default_rng(3).exponential(scale=0.5, size=10000))
    assert abs(shape) < 0.03 and scale == pytest.approx(0.5, rel=0.05)
    with pytest.raises(ValueError, match="positive excesses"):
        rel.fit_gpd([0.5, 0.0, 1.0])


def test_a_tail_without_a_shape_is_the_exponential_and_the_shape_is_validated():
    old = rel.UnrelatedTail.from_dict({"threshold": -1.0, "share": 0.2, "scale": 0.8})  # a fifth-round preset
    assert old.shape == 0.0 and old.quantile(0.02) == pytest.approx(-1.0 + 0.8 * np.log(10.0))
    assert old.local_scale(3.0) == 0.8
    bounded = rel.UnrelatedTail(-1.0, 0.2, 0.8, -0.25)
    assert rel.UnrelatedTail.from_dict(bounded.to_dict()) == bounded
    assert bounded.quantile(0.02) < old.quantile(0.02)  # a lighter tail: a lower anchor for the same budget
    assert bounded.exceedance(np.array([-1.0 + 0.8 / 0.25, 100.0])) == pytest.approx([0.0, 0.0])  # its end point
    for shape in (-0.6, 1.0, float("nan")):
        with pytest.raises(ValueError, match="shape"):
            rel.UnrelatedTail(-1.0, 0.2, 0.8, shape)


def test_the_index_on_a_bounded_tail_tracks_its_budget_near_the_anchor_and_stays_smooth_beyond_its_end():
    tail, budget, bar = rel.UnrelatedTail(-1.0, 0.2, 0.8, -0.25), 0.02, 0.797
    anchor = tail.quantile(budget)
    scale = tail.local_scale(anchor)
    assert 0.0 < scale < tail.scale
    end = tail.threshold - tail.scale / tail.shape
    grid = np.arange(anchor - 3.0, end + 20.0, 1e-3)
    r = rel.anchored_index(grid, anchor, scale, bar)
    assert np.all(np.diff(r) >= 0) and np.all(r < 1.0) and np.max(np.diff(r)) < 1e-3
    assert np.all(np.diff(r[grid < end + 5.0]) > 0)  # strictly increasing through and past the end point
    # near the anchor, the index's e^{−z} is the fitted share of unrelated candidates above s over the budget
    near = anchor + np.array([-0.05, 0.05])
    z = (near - anchor) / scale
    assert np.exp(-z) == pytest.approx(tail.exceedance(near) / budget, rel=2e-3)


def test_the_anchored_index_is_smooth_strictly_increasing_and_below_one():
    anchor, scale, bar = 1.2, 0.9, 0.797
    assert rel.anchored_index(anchor, anchor, scale, bar) == pytest.approx(bar, abs=1e-15)
    grid = np.arange(anchor - 5 * scale, anchor + 15 * scale, 1e-3)
    r = rel.anchored_index(grid, anchor, scale, bar)
    assert np.all(np.diff(r) > 0)  # strictly increasing (wherever double precision can tell r from 1)
    assert np.max(np.diff(r)) < 1e-3  # no jump: at most 1e-3 between neighbouring scores 0.001 apart
    assert np.all((r > 0) & (r < 1))
    wide = rel.anchored_index(np.linspace(-100.0, 100.0, 200001), anchor, scale, bar)
    assert np.all(np.diff(wide) >= 0) and np.all(wide < 1.0) and np.max(np.diff(wide)) < 1e-3
    far = rel.anchored_index(np.array([anchor + 10.0, anchor + 50.0, 1e6, 1e300]), anchor, scale, bar)
    assert np.all(far < 1.0) and far[0] > 0.999
    assert rel.anchored_index(-1e6, anchor, scale, bar) == 0.0
    with pytest.raises(ValueError, match="bar"):
        rel.anchored_index(0.0, anchor, scale, 1.02)
