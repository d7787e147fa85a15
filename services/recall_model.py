"""Forgetting-curve recall for the L4 condition: pure maths, numpy only.

The curve, its consolidation update and the spacing gain follow Hou, Tamoto &
Miyashita, "My agent understands me better": Integrating Dynamic Human-like
Memory Recall and Consolidation in LLM-Based Agents (CHI EA 2024); the
salience terms (``g0`` and the probability bonus) are the study's extension
(SPEC §2).

Every function accepts plain floats or numpy arrays and broadcasts; given only
scalars it returns a float. Two translations sit in front of the formula and
are what calibration is about (docs/recall_calibration.md):

* ``relevance`` maps the embedder's raw cosine to ``r`` in [0, 1]. E5-style
  embedders give unrelated sentences cosines around 0.85, so raw cosine as
  ``r`` would make everything relevant.
* ``elapsed_time`` turns real seconds into ``t`` in the configured unit
  (days, hours or turns, times a scale), honouring pilot mode's short days.

``resolve_recall_params`` reads the effective parameters from the study
definition; nothing here imports Flask or the database.
"""
from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

NORMALISER = 1.0 - math.exp(-1.0)
TIME_UNITS = ("days", "hours", "turns")
RELEVANCE_METHODS = ("raw", "linear")
DEFAULT_SALIENCE_WEIGHTS = {"intensity": 0.4, "disclosure": 0.4, "value": 0.2}
# A score the consolidation step could not produce counts as 0: missing evidence
# must never make a memory easier to recall than a neutral one.
MISSING_SCORE_DEFAULT = 0.0

_CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
_LATIN_WORD = re.compile(r"[A-Za-z]+")


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
    """g after a recall: g + S(t)·(1 + g_update_salience·e). Never smaller than g."""
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


def text_language(text: str) -> str | None:
    """'zh' when Chinese characters at least match Latin words in number, 'en' when only Latin words
    dominate, None for neither (emoji, digits). Selects the relevance mapping."""
    cjk, latin = len(_CJK.findall(text or "")), len(_LATIN_WORD.findall(text or ""))
    if cjk and cjk >= latin:
        return "zh"
    return "en" if latin else None


@dataclass(frozen=True)
class RelevanceMapping:
    """Raw cosine → r ∈ [0, 1].

    ``raw``: r = cosine clipped to [0, 1] (the seed, literally).
    ``linear``: r = (cosine − floor) / (ceiling − floor), clipped, where the floor
    is the embedder's measured similarity of unrelated pairs and the ceiling a
    cosine that counts as fully relevant. Cosine levels differ by language (E5
    gives English pairs lower cosines than Chinese ones), so ``by_language`` may
    hold a (floor, ceiling) per query language. ``embedder_model`` names the model the
    bounds were measured for: they mean nothing for another embedder."""

    method: str = "linear"
    floor: float = 0.0
    ceiling: float = 1.0
    by_language: dict[str, tuple[float, float]] = field(default_factory=dict)
    embedder_model: str | None = None

    def measured_for(self, model: str) -> bool:
        """False when these bounds were calibrated for a different embedding model."""
        return self.method == "raw" or self.embedder_model is None or self.embedder_model == model

    def bounds(self, language: str | None = None) -> tuple[float, float]:
        return self.by_language.get(language or "", (self.floor, self.ceiling))

    def to_r(self, cosine: ArrayLike, language: str | None = None) -> float | np.ndarray:
        cos = np.asarray(cosine, dtype=np.float64)
        if self.method == "raw":
            return _result(np.clip(cos, 0.0, 1.0))
        floor, ceiling = self.bounds(language)
        return _result(np.clip((cos - floor) / (ceiling - floor), 0.0, 1.0))

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["by_language"] = {k: {"floor": f, "ceiling": c} for k, (f, c) in self.by_language.items()}
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


# ---------------------------------------------------------------------------
# Parameters
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class RecallParams:
    preset: str
    top_k: int
    threshold: float
    salience_bonus: float
    g0_base: float
    g0_salience: float
    g_update_salience: float
    time_unit: str
    time_scale: float
    relevance: RelevanceMapping

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["relevance"] = self.relevance.to_dict()
        return data


_PARAM_KEYS = ("top_k", "threshold", "salience_bonus", "g0_base", "g0_salience", "g_update_salience",
               "time_unit", "time_scale", "relevance")


def _merge(base: dict[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = _merge(dict(merged[key]), value)
        else:
            merged[key] = value
    return merged


def _relevance_from_config(raw: Mapping[str, Any]) -> RelevanceMapping:
    method = raw.get("method", "linear")
    if method not in RELEVANCE_METHODS:
        raise ValueError(f"recall relevance method {method!r} must be one of {RELEVANCE_METHODS}")
    if method == "raw":
        return RelevanceMapping("raw")
    floor, ceiling = float(raw["floor"]), float(raw["ceiling"])
    by_language: dict[str, tuple[float, float]] = {}
    for lang, bounds in (raw.get("by_language") or {}).items():
        by_language[lang] = (float(bounds["floor"]), float(bounds["ceiling"]))
    for name, (f, c) in {"default": (floor, ceiling), **by_language}.items():
        if not -1.0 <= f < c <= 1.0:
            raise ValueError(f"recall relevance bounds for {name}: need -1 ≤ floor < ceiling ≤ 1, got {f}, {c}")
    return RelevanceMapping("linear", floor, ceiling, by_language, raw.get("embedder_model"))


def resolve_recall_params(study: Mapping[str, Any], preset: str | None = None,
                          overrides: Mapping[str, Any] | None = None) -> RecallParams:
    """The effective recall parameters of a study definition.

    Layers, later ones winning: the constants given directly under
    ``memory.recall`` (the seed's), the chosen preset (``memory.recall.preset``
    unless ``preset`` is passed), ``memory.recall.overrides``, then ``overrides``."""
    config = study["memory"]["recall"]
    presets = config.get("presets") or {}
    name = preset or config.get("preset") or "calibrated"
    if name not in presets:
        raise ValueError(f"unknown recall preset {name!r}; known: {', '.join(sorted(presets)) or 'none'}")
    values = {k: v for k, v in config.items() if k in _PARAM_KEYS}
    values = _merge(values, presets[name])
    values = _merge(values, config.get("overrides") or {})
    values = _merge(values, overrides or {})
    missing = [k for k in _PARAM_KEYS if k not in values]
    if missing:
        raise ValueError(f"recall preset {name!r} leaves {', '.join(missing)} unset")
    params = RecallParams(
        preset=name,
        top_k=int(values["top_k"]),
        threshold=float(values["threshold"]),
        salience_bonus=float(values["salience_bonus"]),
        g0_base=float(values["g0_base"]),
        g0_salience=float(values["g0_salience"]),
        g_update_salience=float(values["g_update_salience"]),
        time_unit=str(values["time_unit"]),
        time_scale=float(values["time_scale"]),
        relevance=_relevance_from_config(values["relevance"]),
    )
    if params.top_k < 1:
        raise ValueError("recall top_k must be at least 1")
    if not 0.0 < params.threshold <= 1.0:
        raise ValueError("recall threshold must lie in (0, 1]")
    if params.time_unit not in TIME_UNITS:
        raise ValueError(f"recall time_unit {params.time_unit!r} must be one of {TIME_UNITS}")
    if params.time_scale <= 0:
        raise ValueError("recall time_scale must be positive")
    if params.g0_base <= 0 or min(params.salience_bonus, params.g0_salience, params.g_update_salience) < 0:
        raise ValueError("recall g0_base must be positive and the salience factors non-negative")
    return params


# ---------------------------------------------------------------------------
# The scoring core shared by the VectorStore, the calibration and the benchmark
# ---------------------------------------------------------------------------


def top_k_indices(cosines: np.ndarray, k: int, exclude: np.ndarray | None = None) -> np.ndarray:
    """Indices of the ``k`` highest cosines, best first; ties go to the lower index (the older memory).

    ``exclude`` is a boolean mask of rows that may not be candidates."""
    scores = np.asarray(cosines, dtype=np.float64).copy()
    if exclude is not None:
        scores[np.asarray(exclude, dtype=bool)] = -np.inf
    allowed = int(np.isfinite(scores).sum())
    k = min(k, allowed)
    if k <= 0:
        return np.zeros(0, dtype=np.int64)
    if k < scores.size:
        # The k-th best score may be shared by rows outside the partition; keep all ties, then order.
        kth = np.partition(scores, scores.size - k)[scores.size - k]
        pool = np.flatnonzero(scores >= kth)
    else:
        pool = np.flatnonzero(np.isfinite(scores))
    order = np.lexsort((pool, -scores[pool]))
    return pool[order][:k]


@dataclass
class RecallScores:
    """Per-candidate results of one recall, aligned with the candidate order."""

    r: np.ndarray
    p: np.ndarray
    p_final: np.ndarray
    recalled: np.ndarray
    g_after: np.ndarray


def score_candidates(cosine: ArrayLike, t: ArrayLike, g: ArrayLike, salience: ArrayLike,
                     params: RecallParams, language: str | None = None) -> RecallScores:
    """r, p, p_final, the recall decision and the updated g for each candidate."""
    cos = np.atleast_1d(np.asarray(cosine, dtype=np.float64))
    t_ = np.broadcast_to(np.asarray(t, dtype=np.float64), cos.shape)
    g_ = np.broadcast_to(np.asarray(g, dtype=np.float64), cos.shape)
    e = np.broadcast_to(np.asarray(salience, dtype=np.float64), cos.shape)
    r = np.atleast_1d(np.asarray(params.relevance.to_r(cos, language), dtype=np.float64))
    p = np.atleast_1d(np.asarray(recall_probability(r, t_, g_)))
    p_final = np.atleast_1d(np.asarray(final_probability(p, e, params.salience_bonus)))
    recalled = p_final >= params.threshold
    g_after = np.where(recalled, np.asarray(updated_g(g_, t_, e, params.g_update_salience)), g_)
    return RecallScores(r=r, p=p, p_final=p_final, recalled=recalled, g_after=np.asarray(g_after, dtype=np.float64))
