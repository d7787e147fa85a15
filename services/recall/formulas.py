"""The forgetting curve and its inputs: pure maths, numpy only.

The curve, its consolidation update and the spacing gain follow Hou, Tamoto &
Miyashita, "My agent understands me better": Integrating Dynamic Human-like
Memory Recall and Consolidation in LLM-Based Agents (CHI EA 2024); the
salience terms (``g0`` and the probability bonus) are the study's extension
(SPEC §2).

Every function accepts plain floats or numpy arrays and broadcasts; given only
scalars it returns a float. Two translations sit in front of the formula and
are what calibration is about (docs/recall_calibration.md):

* ``RelevanceMapping`` maps the retriever's scores to ``r`` in [0, 1]. E5-style
  embedders give unrelated sentences cosines around 0.85, so raw cosine as
  ``r`` would make everything relevant. The default (``anchored``) makes ``r``
  an index on a false-recall budget, not a probability.
* ``elapsed_time`` turns real seconds into ``t`` in the configured unit
  (days, hours or turns, times a scale), honouring pilot mode's short days.

Which messages are candidates at all is ``services.recall.candidates``; the
parameters are read from the study by ``services.recall.parameters``.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from services.recall.relevance import LogisticRelevance, UnrelatedTail, anchored_index

NORMALISER = 1.0 - math.exp(-1.0)
TIME_UNITS = ("days", "hours", "turns")
DEFAULT_SALIENCE_WEIGHTS = {"intensity": 0.4, "disclosure": 0.4, "value": 0.2}
# A score the consolidation step could not produce counts as 0: missing evidence
# must never make a memory easier to recall than a neutral one.
MISSING_SCORE_DEFAULT = 0.0
# The spacing gain S(t) of the consolidation update takes days since the last recall (the seed's unit),
# independent of the decay's time unit and fitted scale (issue 27). Recorded with every reply's recall
# parameters (``RecallParams.spacing_unit``) so an audit can tell this update from the earlier one.
SPACING_UNIT = "days"



def _result(value: np.ndarray) -> float | np.ndarray:
    return float(value) if np.ndim(value) == 0 else value


# ---------------------------------------------------------------------------
# The formula
# ---------------------------------------------------------------------------


def recall_probability(r: ArrayLike, t: ArrayLike, g: ArrayLike) -> float | np.ndarray:
    """p = (1 − exp(−r·exp(−t/g))) / (1 − exp(−1)) (Hou et al., CHI EA 2024).

    ``r`` is relevance in [0, 1], ``t`` elapsed time (≥ 0) in the configured
    unit, ``g`` the consolidation coefficient (> 0). Inputs are clipped to
    their domain so the result always lies in [0, 1]."""
    r_ = np.clip(np.asarray(r, dtype=np.float64), 0.0, 1.0)
    t_ = np.maximum(np.asarray(t, dtype=np.float64), 0.0)
    g_ = np.maximum(np.asarray(g, dtype=np.float64), 1e-9)
    p = -np.expm1(-r_ * np.exp(-t_ / g_)) / NORMALISER
    return _result(np.clip(p, 0.0, 1.0))


def final_probability(p: ArrayLike, salience: ArrayLike, bonus: float) -> float | np.ndarray:
    """Salience bonus on the retrieval path: p_final = min(1, p + bonus·e)."""
    value = np.asarray(p, dtype=np.float64) + bonus * np.asarray(salience, dtype=np.float64)
    return _result(np.clip(value, 0.0, 1.0))


def initial_g(salience: ArrayLike, g0_base: float = 1.0, g0_salience: float = 0.5) -> float | np.ndarray:
    """Consolidation coefficient at consolidation: g0 = g0_base + g0_salience·e."""
    return _result(g0_base + g0_salience * np.asarray(salience, dtype=np.float64))


def spacing_gain(t: ArrayLike) -> float | np.ndarray:
    """S(t) = (1 − e^{−t}) / (1 + e^{−t}), i.e. tanh(t/2): 0 at t = 0, → 1 for long gaps."""
    return _result(np.tanh(np.maximum(np.asarray(t, dtype=np.float64), 0.0) / 2.0))


def updated_g(g: ArrayLike, t: ArrayLike, salience: ArrayLike, g_update_salience: float = 0.5) -> float | np.ndarray:
    """g after a recall: g + S(t)·(1 + g_update_salience·e). Never smaller than g.

    ``t`` is in the seed's unit, ``SPACING_UNIT``: days since the last recall (not the decay's scaled
    time; ``score_candidates``' ``spacing_days``)."""
    gain = np.asarray(spacing_gain(t)) * (1.0 + g_update_salience * np.asarray(salience, dtype=np.float64))
    return _result(np.asarray(g, dtype=np.float64) + np.maximum(gain, 0.0))


def required_relevance(t: ArrayLike, g: ArrayLike, salience: ArrayLike, threshold: float,
                       bonus: float) -> float | np.ndarray:
    """The smallest r for which p_final reaches ``threshold`` at (t, g, e).

    Solving the curve for r gives r* = x*·exp(t/g) with
    x* = −ln(1 − (threshold − bonus·e)·(1 − e^{−1})); values above 1 mean the
    memory cannot be recalled however relevant it is."""
    needed_p = np.asarray(threshold, dtype=np.float64) - bonus * np.asarray(salience, dtype=np.float64)
    inside = np.clip(1.0 - needed_p * NORMALISER, 1e-12, None)
    x_star = np.maximum(-np.log(inside), 0.0)
    t_ = np.maximum(np.asarray(t, dtype=np.float64), 0.0)
    g_ = np.maximum(np.asarray(g, dtype=np.float64), 1e-9)
    return _result(x_star * np.exp(t_ / g_))


# ---------------------------------------------------------------------------
# Emotional salience
# ---------------------------------------------------------------------------


def clamp_score(value: Any, missing: float = MISSING_SCORE_DEFAULT) -> float:
    """One salience score clamped to [0, 1]; None, NaN and non-numbers become ``missing``."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return missing
    if math.isnan(number):
        return missing
    return min(1.0, max(0.0, number))


def emotional_salience(intensity: Any, disclosure: Any, value: Any,
                       weights: Mapping[str, float] | None = None,
                       missing: float = MISSING_SCORE_DEFAULT) -> float:
    """e = 0.4·I + 0.4·D + 0.2·V with each score clamped to [0, 1] (missing → ``missing``)."""
    w = {**DEFAULT_SALIENCE_WEIGHTS, **(weights or {})}
    return (w["intensity"] * clamp_score(intensity, missing)
            + w["disclosure"] * clamp_score(disclosure, missing)
            + w["value"] * clamp_score(value, missing))


def emotional_salience_array(intensity: ArrayLike, disclosure: ArrayLike, value: ArrayLike,
                             weights: Mapping[str, float] | None = None,
                             missing: float = MISSING_SCORE_DEFAULT) -> np.ndarray:
    """Vectorised ``emotional_salience``: NaN marks a missing score."""
    w = {**DEFAULT_SALIENCE_WEIGHTS, **(weights or {})}

    def clean(scores: ArrayLike) -> np.ndarray:
        arr = np.asarray(scores, dtype=np.float64)
        return np.clip(np.where(np.isnan(arr), missing, arr), 0.0, 1.0)

    return w["intensity"] * clean(intensity) + w["disclosure"] * clean(disclosure) + w["value"] * clean(value)


# ---------------------------------------------------------------------------
# Translating the embedder and the clock into r and t
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class RelevanceMapping:
    """A candidate's scores → r ∈ [0, 1].

    ``raw``: r = cosine clipped to [0, 1] (the seed, literally).
    ``linear``: r = (cosine − floor) / (ceiling − floor), clipped, where the floor
    is the embedder's measured similarity of unrelated pairs and the ceiling a
    cosine that counts as fully relevant. Cosine levels differ by language (E5
    gives English pairs lower cosines than Chinese ones), so ``by_language`` may
    hold a (floor, ceiling) per query language.
    ``logistic``: r = P(relevant | the retriever's scores), a per-language logistic model
    (``services.recall.relevance``) fitted by ``scripts/calibrate_recall.py``; ``fitted_for``
    records the retrieval settings (fusion weights) its scores came from.
    ``anchored`` (issue 17): r is an index on a false-recall budget, not a probability. The score s
    is the logistic model's linear score; ``tails`` holds, per query language (``default`` for any
    other), the fitted upper tail of the development participants' *unrelated* candidates' s. The
    score above which a share ``false_recall_budget`` of them lies (the language's own budget where
    ``budget_by_language`` names one) lands exactly on ``anchor_r``, the
    curve's bar for a neutral memory (e = 0, g = g0_base) ``anchor_days`` study days old (T2's unlock
    offset); r rises smoothly through it with the tail's local scale at the anchor
    (``services.recall.relevance.anchored_index``).
    ``embedder_model`` names the model the bounds or fit were measured for: they mean nothing
    for another embedder."""

    method: str = "linear"
    floor: float = 0.0
    ceiling: float = 1.0
    by_language: dict[str, tuple[float, float]] = field(default_factory=dict)
    embedder_model: str | None = None
    model: LogisticRelevance | None = None
    fitted_for: dict[str, Any] | None = None
    tails: dict[str, UnrelatedTail] = field(default_factory=dict)
    false_recall_budget: float | None = None
    # per query language: that language's budget instead of ``false_recall_budget`` (study file:
    # ``false_recall_budget_by_language``); languages not named, and messages of no language, keep the default
    budget_by_language: dict[str, float] = field(default_factory=dict)
    anchor_days: float | None = None
    anchor_r: float | None = None  # resolved from the curve's parameters (resolve_recall_params)

    def measured_for(self, model: str) -> bool:
        """False when these bounds were calibrated for a different embedding model."""
        return self.method == "raw" or self.embedder_model is None or self.embedder_model == model

    def bounds(self, language: str | None = None) -> tuple[float, float]:
        return self.by_language.get(language or "", (self.floor, self.ceiling))

    def to_r(self, cosine: ArrayLike, language: str | None = None,
             scores: Mapping[str, ArrayLike] | None = None) -> float | np.ndarray:
        """r for candidates with these cosines; ``logistic`` also needs the retriever's ``scores``
        (``fused``, ``lexical_z``, ``dense_z``; the cosine is taken from ``cosine``)."""
        cos = np.asarray(cosine, dtype=np.float64)
        if self.method == "raw":
            return _result(np.clip(cos, 0.0, 1.0))
        if self.method in ("logistic", "anchored"):
            if self.model is None or scores is None:
                raise ValueError(f"{self.method} relevance needs its model and the retriever's scores")
            if self.method == "logistic":
                return _result(self.model.predict({**scores, "cosine": cos}, language))
            anchor = self.anchor_score(language)
            return _result(anchored_index(self.model.linear({**scores, "cosine": cos}, language), anchor,
                                          self.tail(language).local_scale(anchor), self.anchor_r))
        floor, ceiling = self.bounds(language)
        return _result(np.clip((cos - floor) / (ceiling - floor), 0.0, 1.0))

    def tail(self, language: str | None) -> UnrelatedTail:
        return self.tails.get(language or "", self.tails["default"])

    def budget(self, language: str | None = None) -> float | None:
        """The false-recall budget of messages in ``language``: its own, else ``false_recall_budget``."""
        return self.budget_by_language.get(language or "", self.false_recall_budget)

    def anchor_score(self, language: str | None = None) -> float:
        """The score at the (1 − budget) quantile of the language's fitted unrelated tail."""
        return self.tail(language).quantile(self.budget(language))

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["by_language"] = {k: {"floor": f, "ceiling": c} for k, (f, c) in self.by_language.items()}
        data["model"] = self.model.to_dict() if self.model else None
        data["tails"] = {k: tail.to_dict() for k, tail in self.tails.items()}
        return data


def relevance(cosine: ArrayLike, floor: float, ceiling: float) -> float | np.ndarray:
    """Linear rescale of raw cosine between ``floor`` (→ 0) and ``ceiling`` (→ 1), clipped."""
    return RelevanceMapping("linear", floor, ceiling).to_r(cosine)


def study_days(elapsed_seconds: ArrayLike, day_seconds: float) -> float | np.ndarray:
    """Elapsed study days: real seconds / day_seconds (86400 normally; less in pilot mode)."""
    if day_seconds <= 0:
        raise ValueError("day_seconds must be positive")
    return _result(np.maximum(np.asarray(elapsed_seconds, dtype=np.float64), 0.0) / day_seconds)


def elapsed_time(elapsed_seconds: ArrayLike, *, unit: str, time_scale: float, day_seconds: float,
                 turns: ArrayLike | None = None) -> float | np.ndarray:
    """``t`` for the curve: elapsed study time in ``unit`` times ``time_scale``.

    ``days`` and ``hours`` count study time (so pilot mode's short days age memories
    as fast as real days would); ``turns`` counts the participant's messages since
    the reference time, which the caller passes as ``turns``."""
    if unit == "days":
        base = np.asarray(study_days(elapsed_seconds, day_seconds))
    elif unit == "hours":
        base = np.asarray(study_days(elapsed_seconds, day_seconds)) * 24.0
    elif unit == "turns":
        if turns is None:
            raise ValueError("time unit 'turns' needs the number of turns elapsed")
        base = np.maximum(np.asarray(turns, dtype=np.float64), 0.0)
    else:
        raise ValueError(f"unknown time unit {unit!r}; use one of {TIME_UNITS}")
    return _result(base * time_scale)
