"""Fitting L4's relevance on the calibration sample's development participants
(docs/recall_calibration.md): the per-language logistic model whose linear score s ranks candidates,
the upper tail of the unrelated candidates' s, and the choice of the false-recall budget and the time
unit. Only development pairs and traces reach a fit; held-out and blind participants are replayed
afterwards and change nothing. ``bootstrap`` refits on resampled development participants to show how
stable the choice is."""
from __future__ import annotations

import random
from dataclasses import replace
from typing import Any

import numpy as np

from config import SECONDS_PER_DAY
from services import recall_model as rm
from services.memory.relevance import LogisticRelevance, UnrelatedTail, fit_monotone, fit_unrelated_tail
from services.recall_calibration_replay import (
    FEATURE_NAMES,
    SAMPLE_LANGUAGE,
    TARGETS,
    UNRELATED_MAX,
    Trace,
    exceeds_by_more_than_noise,
    group_outcomes,
    labelled_pairs,
    replay_all,
    schedule_days,
    target_failures,
)
from services.study import Study

DEFAULT_FEATURES = ("fused", "dense_z", "cosine")
# Curve time units tried by --fit, in days per unit (t = study days / unit).
TIME_UNIT_GRID_DAYS = (7, 14, 30, 45, 60, 90, 120, 180, 270, 365, 540, 730)
# False-recall budgets tried by --fit for the anchored relevance (share of unrelated candidates above the anchor).
BUDGET_GRID = (0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04)
ANCHOR_TASK = "T2"  # the anchor lands on the bar of a neutral memory as old as this task's unlock offset

Pairs = dict[tuple[str, str], dict[str, np.ndarray]]


def _pooled(pairs: Pairs, keys: list[tuple[str, str]]) -> dict[str, np.ndarray]:
    return {name: np.concatenate([pairs[k][name] for k in keys]) for name in (*FEATURE_NAMES, "label")}


def fit_relevance(pairs: Pairs, features: tuple[str, ...], split: str = "dev") -> LogisticRelevance:
    """Per-language logistic models on the ``split`` pairs, and a pooled one as the default."""
    keys = [k for k in pairs if k[0] == split]
    by_language = {}
    for language in sorted({lang for _, lang in keys}):
        data = _pooled(pairs, [k for k in keys if k[1] == language])
        by_language[language] = fit_monotone(data, data["label"], features)
    everything = _pooled(pairs, keys)
    return LogisticRelevance(fit_monotone(everything, everything["label"], features), by_language)


def logistic_params(base: rm.RecallParams, model: LogisticRelevance, days_per_unit: float, embedder_model: str,
                    retrieval: rm.RetrievalSettings, preset: str = "fitted") -> rm.RecallParams:
    relevance = rm.RelevanceMapping("logistic", model=model, embedder_model=embedder_model,
                                    fitted_for={"retrieval": retrieval.to_dict()})
    return replace(base, preset=preset, time_unit="days", time_scale=1.0 / days_per_unit, relevance=relevance)


def search_time_scale(traces: list[Trace], params: rm.RecallParams, model: LogisticRelevance,
                      study: Study, embedder_model: str, retrieval: rm.RetrievalSettings, *,
                      day_seconds: float = SECONDS_PER_DAY) -> tuple[float, list[dict[str, Any]]]:
    """The time unit, chosen on the development participants: the shortest unit (the fastest
    forgetting) under which both languages meet the targets; if none does, among the units within
    UNRELATED_MAX the one whose worst (share / target) over languages and tasks is highest (ties: the
    shorter unit)."""
    dev = [t for t in traces if t.split == "dev"]
    tried = []
    for days in TIME_UNIT_GRID_DAYS:
        outcomes = replay_all(dev, logistic_params(params, model, days, embedder_model, retrieval), study,
                              day_seconds=day_seconds, events=False)
        languages = sorted({lang for _, lang in outcomes})
        failures = [f for lang in languages for f in target_failures(group_outcomes(outcomes, "dev", lang),
                                                                      f"dev {lang}")]
        worst = min((group_outcomes(outcomes, "dev", lang)[t].relevant_share() / minimum
                     for lang in languages for t, minimum in TARGETS.items()), default=0.0)
        unrelated = max((o.unrelated_rate() for lang in languages
                         for o in group_outcomes(outcomes, "dev", lang).values()), default=0.0)
        tried.append({"days_per_unit": days, "failures": failures, "worst_ratio": worst, "unrelated": unrelated,
                      "falls_with_age": not any("more than noise" in f for f in failures),
                      "shares": {lang: {t: o.relevant_share() for t, o in group_outcomes(outcomes, "dev", lang).items()}
                                 for lang in languages}})
    passing = [row for row in tried if not row["failures"]]
    if passing:
        return passing[0]["days_per_unit"], tried
    allowed = [row for row in tried if row["unrelated"] <= UNRELATED_MAX] or tried
    best = max(allowed, key=lambda row: (round(row["worst_ratio"], 6), row["falls_with_age"], -row["days_per_unit"]))
    return best["days_per_unit"], tried


def unrelated_scores(pairs: Pairs, model: LogisticRelevance, language: str | None, split: str = "dev") -> np.ndarray:
    """The linear scores s of the ``split``'s unrelated pairs in ``language`` (None: every language)."""
    keys = [k for k in pairs if k[0] == split and language in (None, k[1])]
    found = []
    for key in keys:
        data = pairs[key]
        unrelated = data["label"] == 0
        found.append(np.atleast_1d(model.linear({f: data[f][unrelated] for f in FEATURE_NAMES}, key[1])))
    return np.concatenate(found) if found else np.zeros(0)


def fit_tails(pairs: Pairs, model: LogisticRelevance, split: str = "dev") -> dict[str, UnrelatedTail]:
    """Each language's unrelated-score tail, and a pooled ``default`` one (each under its own model)."""
    languages = sorted({lang for s, lang in pairs if s == split})
    tails = {lang: fit_unrelated_tail(unrelated_scores(pairs, model, lang, split)) for lang in languages}
    pooled = np.concatenate([np.atleast_1d(model.model(None).linear(
        {f: pairs[k][f][pairs[k]["label"] == 0] for f in FEATURE_NAMES})) for k in pairs if k[0] == split])
    return {"default": fit_unrelated_tail(pooled), **tails}


def anchored_params(base: rm.RecallParams, model: LogisticRelevance, tails: dict[str, UnrelatedTail], budget: float,
                    days_per_unit: float, anchor_days: float, embedder_model: str, retrieval: rm.RetrievalSettings,
                    preset: str = "fitted") -> rm.RecallParams:
    relevance = rm.RelevanceMapping("anchored", model=model, embedder_model=embedder_model,
                                    fitted_for={"retrieval": retrieval.to_dict()}, tails=tails,
                                    false_recall_budget=budget, anchor_days=anchor_days)
    return rm.resolve_anchor(replace(base, preset=preset, time_unit="days", time_scale=1.0 / days_per_unit,
                                     relevance=relevance))


def _shape_holds(tasks: dict) -> bool:
    ordered = [tasks[t] for t in TARGETS if t in tasks]
    return not any(exceeds_by_more_than_noise(a, b) for a, b in zip(ordered, ordered[1:], strict=False))


def _search_row(outcomes, budget: float, days: float) -> dict[str, Any]:
    languages = sorted({lang for _, lang in outcomes})
    groups = {lang: group_outcomes(outcomes, "dev", lang) for lang in languages}
    return {
        "budget": budget, "days_per_unit": days,
        "shares": {lang: {t: o.relevant_share() for t, o in tasks.items()} for lang, tasks in groups.items()},
        "unrelated": max((o.unrelated_rate() for tasks in groups.values() for o in tasks.values()), default=0.0),
        "falls_with_age": all(_shape_holds(tasks) for tasks in groups.values()),
        "worst_ratio": min((tasks[t].relevant_share() / minimum for tasks in groups.values()
                            for t, minimum in TARGETS.items() if t in tasks), default=0.0),
    }


def choose(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The rule of --fit: the forgetting shape first (on every language no task above the one before it by
    more than noise), subject to at most UNRELATED_MAX of the unrelated candidates recalled at every task; among
    those the highest worst share / target over languages and tasks; ties (within 1e-6): the budget nearest the
    default, then the longer unit (the gentler forgetting). With no row keeping both, the rows within
    UNRELATED_MAX, shape first; with none of those either, all rows."""
    within = [row for row in rows if row["unrelated"] <= UNRELATED_MAX] or rows
    shaped = [row for row in within if row["falls_with_age"]] or within
    return max(shaped, key=lambda row: (round(row["worst_ratio"], 6),
                                        -abs(row["budget"] - rm.DEFAULT_FALSE_RECALL_BUDGET), row["days_per_unit"]))


def fit_anchored(traces: list[Trace], base: rm.RecallParams, study: Study, embedder_model: str,
                 retrieval: rm.RetrievalSettings, *, features: tuple[str, ...] = DEFAULT_FEATURES,
                 day_seconds: float = SECONDS_PER_DAY) -> tuple[rm.RecallParams, list[dict[str, Any]]]:
    """The anchored preset fitted on the development traces among ``traces``: the logistic model (its linear
    score is s), the unrelated tails, and the budget and time unit ``choose`` picks over BUDGET_GRID x
    TIME_UNIT_GRID_DAYS. Returns the parameters and every row tried."""
    dev = [t for t in traces if t.split == "dev"]
    pairs = labelled_pairs(dev)
    model = fit_relevance(pairs, features)
    tails = fit_tails(pairs, model)
    anchor_days = schedule_days(study)[ANCHOR_TASK]
    rows = []
    for budget in BUDGET_GRID:
        for days in TIME_UNIT_GRID_DAYS:
            try:
                params = anchored_params(base, model, tails, budget, days, anchor_days, embedder_model, retrieval)
            except ValueError:  # a unit so short that a neutral memory is past recall at the anchor's age
                continue
            outcomes = replay_all(dev, params, study, day_seconds=day_seconds, events=False)
            rows.append(_search_row(outcomes, budget, days))
    best = choose(rows)
    return anchored_params(base, model, tails, best["budget"], best["days_per_unit"], anchor_days, embedder_model,
                           retrieval), rows


def resample(traces: list[Trace], rng: random.Random) -> list[Trace]:
    """The development traces drawn with replacement, per language (as many as there are), renamed apart so a
    participant drawn twice counts twice."""
    dev = [t for t in traces if t.split == "dev"]
    drawn = []
    for language in sorted({t.language for t in dev}):
        mine = [t for t in dev if t.language == language]
        drawn += [replace(rng.choice(mine)) for _ in mine]
    for i, trace in enumerate(drawn):
        trace.participant = f"{trace.participant}#{i}"
    return drawn


def bootstrap(traces: list[Trace], base: rm.RecallParams, study: Study, embedder_model: str,
              retrieval: rm.RetrievalSettings, *, resamples: int, seed: int = 17,
              features: tuple[str, ...] = DEFAULT_FEATURES,
              day_seconds: float = SECONDS_PER_DAY) -> list[dict[str, Any]]:
    """Refit on ``resamples`` bootstrap resamples of the development participants; each row: the chosen budget
    and unit, and the held-out and blind relevant shares per language and task under that refit."""
    rng = random.Random(seed)
    checked = [t for t in traces if t.split != "dev"]
    rows = []
    for _ in range(resamples):
        params, _tried = fit_anchored(resample(traces, rng), base, study, embedder_model, retrieval,
                                      features=features, day_seconds=day_seconds)
        outcomes = replay_all(checked, params, study, day_seconds=day_seconds, events=False)
        rows.append({"budget": params.relevance.false_recall_budget, "days_per_unit": 1.0 / params.time_scale,
                     "shares": {f"{split} {lang}": {t: o.relevant_share()
                                                     for t, o in group_outcomes(outcomes, split, lang).items()}
                                for split in ("held-out", "blind") for lang in sorted(set(SAMPLE_LANGUAGE.values()))}})
    return rows
