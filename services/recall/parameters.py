"""The effective recall parameters of a study: ``memory.recall`` (preset, overrides) and ``memory.retrieval``.

``resolve_recall_params`` reads them from the study definition, refusing bad values by name; the app
resolves them once, when the study is loaded (``Study.memory.recall``).
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from services.platform.mappings import deep_merge
from services.recall.candidates import CandidateRule, candidate_rule_from_config
from services.recall.directed import DirectedRetrieval
from services.recall.formulas import SPACING_UNIT, TIME_UNITS, RelevanceMapping, elapsed_time, required_relevance
from services.recall.rehearsal import RehearsalRoute
from services.recall.relevance import LogisticRelevance, UnrelatedTail
from services.recall.retrieval import BM25_B, BM25_K1, FusionWeights

RELEVANCE_METHODS = ("raw", "linear", "logistic", "anchored")
DEFAULT_FALSE_RECALL_BUDGET = 0.02
# Any positive length works: t for a given number of study days does not depend on it.
SECONDS_PER_DAY_FOR_ANCHOR = 86400.0


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
    candidates: CandidateRule = field(default_factory=CandidateRule)
    spacing_unit: str = SPACING_UNIT  # the spacing gain's t: study days since the last recall, never scaled
    # an explicit request to remember may bring back its clear best match below the decay bar (services.recall.directed)
    directed_retrieval: DirectedRetrieval = field(default_factory=DirectedRetrieval)
    # a memory reached directly and through an exchange that recalled it may come back (services.recall.rehearsal)
    rehearsal_route: RehearsalRoute = field(default_factory=RehearsalRoute)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["relevance"] = self.relevance.to_dict()
        data["candidates"] = self.candidates.to_dict()
        data["directed_retrieval"] = self.directed_retrieval.to_dict()
        data["rehearsal_route"] = self.rehearsal_route.to_dict()
        return data


_PARAM_KEYS = ("top_k", "threshold", "salience_bonus", "g0_base", "g0_salience", "g_update_salience",
               "time_unit", "time_scale", "relevance")
# absent: the default CandidateRule; directed retrieval and the rehearsal route off
_OPTIONAL_KEYS = ("candidates", "directed_retrieval", "rehearsal_route")


def _relevance_from_config(raw: Mapping[str, Any]) -> RelevanceMapping:
    method = raw.get("method", "linear")
    if method not in RELEVANCE_METHODS:
        raise ValueError(f"recall relevance method {method!r} must be one of {RELEVANCE_METHODS}")
    if method == "raw":
        return RelevanceMapping("raw")
    if method in ("logistic", "anchored"):
        if not isinstance(raw.get("model"), Mapping):
            raise ValueError(f"recall relevance method {method!r} needs a fitted 'model' "
                             "(scripts/calibrate_recall.py --fit --write-preset)")
        mapping = RelevanceMapping(method, model=LogisticRelevance.from_dict(raw["model"]),
                                   embedder_model=raw.get("embedder_model"), fitted_for=raw.get("fitted_for"))
        return mapping if method == "logistic" else _anchored_from_config(mapping, raw)
    floor, ceiling = float(raw["floor"]), float(raw["ceiling"])
    by_language: dict[str, tuple[float, float]] = {}
    for lang, bounds in (raw.get("by_language") or {}).items():
        by_language[lang] = (float(bounds["floor"]), float(bounds["ceiling"]))
    for name, (f, c) in {"default": (floor, ceiling), **by_language}.items():
        if not -1.0 <= f < c <= 1.0:
            raise ValueError(f"recall relevance bounds for {name}: need -1 ≤ floor < ceiling ≤ 1, got {f}, {c}")
    return RelevanceMapping("linear", floor, ceiling, by_language, raw.get("embedder_model"))


def directed_retrieval_from_config(raw: Mapping[str, Any] | None) -> DirectedRetrieval:
    """The rule from ``memory.recall.directed_retrieval`` (None: off), refusing bad values by name."""
    if raw is None:
        return DirectedRetrieval()
    unknown = sorted(set(raw) - {"enabled", "min_r", "min_margin"})
    if unknown:
        raise ValueError(f"recall directed_retrieval: unknown keys {', '.join(unknown)}")
    default = DirectedRetrieval()
    enabled = raw.get("enabled", default.enabled)
    if not isinstance(enabled, bool):
        raise ValueError(f"recall directed_retrieval.enabled must be true or false, got {enabled!r}")
    rule = DirectedRetrieval(enabled=enabled, min_r=float(raw.get("min_r", default.min_r)),
                             min_margin=float(raw.get("min_margin", default.min_margin)))
    if not 0.0 <= rule.min_r <= 1.0:
        raise ValueError(f"recall directed_retrieval.min_r must lie in [0, 1], got {rule.min_r}")
    if not 0.0 <= rule.min_margin <= 1.0:
        raise ValueError(f"recall directed_retrieval.min_margin must lie in [0, 1], got {rule.min_margin}")
    return rule


def rehearsal_route_from_config(raw: Mapping[str, Any] | None) -> RehearsalRoute:
    """The rule from ``memory.recall.rehearsal_route`` (None: off), refusing bad values by name."""
    if raw is None:
        return RehearsalRoute()
    if not isinstance(raw, Mapping):
        raise ValueError(f"recall rehearsal_route must be an object like {{\"enabled\": true}}, got {raw!r}")
    unknown = sorted(set(raw) - {"enabled"})
    if unknown:
        raise ValueError(f"recall rehearsal_route: unknown keys {', '.join(unknown)}")
    enabled = raw.get("enabled", RehearsalRoute().enabled)
    if not isinstance(enabled, bool):
        raise ValueError(f"recall rehearsal_route.enabled must be true or false, got {enabled!r}")
    return RehearsalRoute(enabled=enabled)


def _check_budget(name: str, budget: float, share: float, what: str) -> None:
    """A budget is a quantile of a fitted tail, which covers only its top ``share`` of the unrelated scores."""
    if not math.isfinite(budget) or not 0.0 < budget < share:
        raise ValueError(f"recall relevance {name} must lie in (0, {share:g}) ({what}), got {budget}")


def _anchored_from_config(mapping: RelevanceMapping, raw: Mapping[str, Any]) -> RelevanceMapping:
    tails = raw.get("tails")
    if not isinstance(tails, Mapping) or "default" not in tails:
        raise ValueError("recall relevance method 'anchored' needs fitted 'tails' with a 'default' "
                         "(scripts/calibrate_recall.py --fit --write-preset)")
    try:
        budget = float(raw.get("false_recall_budget", DEFAULT_FALSE_RECALL_BUDGET))
        anchor_days = float(raw["anchor_days"])
        fitted = {lang: UnrelatedTail.from_dict(tail) for lang, tail in tails.items()}
    except (KeyError, TypeError) as exc:
        raise ValueError(f"recall relevance 'anchored' needs anchor_days and tails of threshold, share and scale "
                         f"(and optionally shape) ({exc})") from exc
    _check_budget("false_recall_budget", budget, min(t.share for t in fitted.values()), "the fitted tails' share")
    by_language = raw.get("false_recall_budget_by_language") or {}
    if not isinstance(by_language, Mapping):
        raise ValueError("recall relevance false_recall_budget_by_language maps a language to its budget")
    try:
        by_language = {str(lang): float(value) for lang, value in by_language.items()}
    except (TypeError, ValueError) as exc:
        raise ValueError(f"recall relevance false_recall_budget_by_language: a budget is a number ({exc})") from exc
    for lang, value in by_language.items():
        _check_budget(f"false_recall_budget_by_language[{lang!r}]", value, fitted.get(lang, fitted["default"]).share,
                      "its fitted tail's share")
    if not anchor_days >= 0.0:
        raise ValueError(f"recall relevance anchor_days must be 0 or more, got {anchor_days}")
    return replace(mapping, tails=fitted, false_recall_budget=budget, budget_by_language=by_language,
                   anchor_days=anchor_days)


def resolve_anchor(params: RecallParams) -> RecallParams:
    """An anchored relevance's bar: the r a neutral memory (e = 0, g = g0_base) needs at anchor_days."""
    relevance = params.relevance
    if relevance.method != "anchored":
        return params
    t = elapsed_time(relevance.anchor_days * SECONDS_PER_DAY_FOR_ANCHOR, unit=params.time_unit,
                     time_scale=params.time_scale, day_seconds=SECONDS_PER_DAY_FOR_ANCHOR,
                     turns=relevance.anchor_days)
    bar = float(required_relevance(t, params.g0_base, 0.0, params.threshold, params.salience_bonus))
    if not 0.0 < bar < 1.0:
        raise ValueError(f"recall relevance 'anchored': a neutral memory {relevance.anchor_days:g} days old needs "
                         f"r = {bar:.3f} under this time unit; the anchor needs a bar in (0, 1)")
    return replace(params, relevance=replace(relevance, anchor_r=bar))


def embedder_warning(recall: RecallParams, embedder_model: str) -> str | None:
    """Why ``r`` means nothing with this embedder, or None when the active preset was fitted for it."""
    if recall.relevance.measured_for(embedder_model):
        return None
    return (f"the configured embedder is {embedder_model}, but the active recall preset {recall.preset!r} was "
            f"fitted for {recall.relevance.embedder_model}: its relevance r means nothing for this embedder; "
            "run scripts/calibrate_recall.py --fit --write-preset")


def resolve_recall_params(config: Mapping[str, Any], preset: str | None = None,
                          overrides: Mapping[str, Any] | None = None) -> RecallParams:
    """The effective recall parameters of a study's ``memory.recall`` section (``config``).

    Layers, later ones winning: the constants given directly under
    ``memory.recall`` (the seed's), the chosen preset (``memory.recall.preset``
    unless ``preset`` is passed), ``memory.recall.overrides``, then ``overrides``.
    The app resolves them once, when the study is loaded (``Study.memory.recall``)."""
    presets = config.get("presets") or {}
    name = preset or config.get("preset") or "anchored"
    if name not in presets:
        raise ValueError(f"unknown recall preset {name!r}; known: {', '.join(sorted(presets)) or 'none'}")
    values = {k: v for k, v in config.items() if k in _PARAM_KEYS + _OPTIONAL_KEYS}
    values = deep_merge(values, presets[name])
    values = deep_merge(values, config.get("overrides") or {})
    values = deep_merge(values, overrides or {})
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
        candidates=candidate_rule_from_config(values.get("candidates")),
        directed_retrieval=directed_retrieval_from_config(values.get("directed_retrieval")),
        rehearsal_route=rehearsal_route_from_config(values.get("rehearsal_route")),
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
    return resolve_anchor(params)


@dataclass(frozen=True)
class RetrievalSettings:
    """How L4 (and S1) find candidates: the hybrid retriever of ``services.recall.retrieval``.

    ``fusion``: weights of the z-scored BM25 and cosine scores; ``k1``/``b``: BM25's;
    ``neighbour_turns``: earlier exchanges of the same task indexed lexically with each memory."""

    fusion: FusionWeights = field(default_factory=FusionWeights)
    k1: float = BM25_K1
    b: float = BM25_B
    neighbour_turns: int = 2

    def to_dict(self) -> dict[str, Any]:
        return {"fusion": {"lexical": self.fusion.lexical, "dense": self.fusion.dense}, "k1": self.k1,
                "b": self.b, "neighbour_turns": self.neighbour_turns}


def retrieval_from_config(raw: Mapping[str, Any] | None) -> RetrievalSettings:
    """The retrieval settings of a study's ``memory.retrieval`` section (defaults where absent)."""
    raw = raw or {}
    fusion = raw.get("fusion") or {}
    settings = RetrievalSettings(
        fusion=FusionWeights(lexical=float(fusion.get("lexical", 1.5)), dense=float(fusion.get("dense", 1.0))),
        k1=float(raw.get("k1", BM25_K1)), b=float(raw.get("b", BM25_B)),
        neighbour_turns=int(raw.get("neighbour_turns", 2)))
    if settings.fusion.lexical < 0 or settings.fusion.dense < 0 or not (settings.fusion.lexical
                                                                        or settings.fusion.dense):
        raise ValueError("memory.retrieval.fusion weights must be non-negative and not both 0")
    if settings.k1 < 0 or not 0.0 <= settings.b <= 1.0:
        raise ValueError("memory.retrieval needs k1 >= 0 and 0 <= b <= 1")
    if settings.neighbour_turns < 0:
        raise ValueError("memory.retrieval.neighbour_turns must be 0 or more")
    return settings
