"""Calibration of L4's forgetting-curve recall on the bundled sample (docs/recall_calibration.md).

``calibrate`` replays the study's schedule over the calibration participants with a recall preset (or
fits one on the development participants: ``fit=True``) and returns a ``CalibrationReport``;
``check_active_preset`` is the pre-flight's question: does the study's active preset, with the
configured embedder, meet the pre-registered targets on each language's held-out and blind participants pooled
(the decision rule of ``recall_calibration_report``: met / within error / missed)?
``scripts/calibrate_recall.py`` is the command line over these functions. The sample and its replay
live in ``services.research.recall_calibration_replay``, the fits in ``services.research.recall_calibration_fit``, the
report and the decision rule in ``services.research.recall_calibration_report``.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from services.platform.clock import SECONDS_PER_DAY
from services.recall.parameters import resolve_recall_params
from services.research.recall_calibration_fit import (
    CHECK_GROUP_SIZE,
    CV_FOLDS,
    DEFAULT_FEATURES,
    bootstrap,
    fit_anchored,
)
from services.research.recall_calibration_replay import (
    FEATURE_NAMES,
    SAMPLE,
    MemoEmbedder,
    Outcomes,
    Trace,
    check_candidate_rule,
    labelled_pairs,
    replay_all,
    sample_salience,
    split_of,
    study_gaps,
    traces_for,
)
from services.research.recall_calibration_report import (
    JUDGED_GROUP,
    CalibrationReport,
    judge_outcomes,
    outcome_figures,
    recall_ceilings,
    rule_failures,
    rule_within_error,
)
from services.research.recall_operating_curve import operating_curve, require_anchored
from services.study.definition import Study, load_study
from services.study.settings import Settings

TURN_GAPS = (0.0, 3.0, 10.0, 20.0, 40.0)


def configured_embedder(settings: Settings):
    """The embedder ``settings`` name (``EMBEDDING_PROVIDER``, read by the entry point; offline by default)."""
    if settings.embedding_provider == "offline":
        from services.llm.providers.offline import OfflineEmbeddingProvider

        return OfflineEmbeddingProvider()
    from services.llm.embedding_service import build_embedder

    return build_embedder(settings)


def _memo(embedder) -> MemoEmbedder:
    """The given embedder (the offline one when none is given), remembering what it embedded."""
    if embedder is None:
        from services.llm.providers.offline import OfflineEmbeddingProvider

        embedder = OfflineEmbeddingProvider()
    return embedder if isinstance(embedder, MemoEmbedder) else MemoEmbedder(embedder)


def calibrate(study: Study | None = None, *, preset: str | None = None, embedder=None,
              day_seconds: float = SECONDS_PER_DAY, overrides: dict[str, Any] | None = None,
              fit: bool = False, features: tuple[str, ...] = DEFAULT_FEATURES,
              traces: list[Trace] | None = None, resamples: int = 0, folds: int = CV_FOLDS,
              curve: bool = False, per_language: bool = True) -> CalibrationReport:
    """Everything the script prints, for the given study (default: the configured one).

    ``fit``: fit the anchored relevance and choose the budget and the time unit on the development
    participants (the report's ``params`` are then the fitted preset, named "fitted"); ``resamples``: with
    ``fit``, also refit on that many bootstrap resamples of the development participants; ``folds``: with ``fit``,
    judge the budget and the unit on that many folds' out-of-fold counts (0: in-sample); ``per_language``: with
    ``fit``, choose a budget per language (false: one for all); ``curve``: also replay the
    (fitted) preset under every budget of ``CURVE_BUDGETS`` (``operating_curve``; an anchored preset only, else
    ``NotAnchored``)."""
    study = study or load_study()
    params = resolve_recall_params(study.memory.recall_config, preset=preset, overrides=overrides)
    retrieval = study.memory.retrieval
    if curve and not fit:
        require_anchored(params)  # before the traces are built, not after
    embedder = _memo(embedder)
    traces = traces if traces is not None else traces_for(study, embedder, params, retrieval, day_seconds=day_seconds)
    search: list[dict[str, Any]] = []
    spread: list[dict[str, Any]] = []
    if fit:
        params, search = fit_anchored(traces, params, study, embedder.model, retrieval, features=features,
                                      day_seconds=day_seconds, folds=folds, per_language=per_language)
        if resamples:
            spread = bootstrap(traces, params, study, embedder.model, retrieval, resamples=resamples,
                               features=features, day_seconds=day_seconds, folds=folds, per_language=per_language)
    pairs = labelled_pairs(traces)
    for key, data in pairs.items():
        data["r"] = np.atleast_1d(params.relevance.to_r(
            data["cosine"], key[1], {f: data[f] for f in FEATURE_NAMES if f != "cosine"}))
    weights = dict(study.memory.salience_weights)
    excluded = [text for tasks in SAMPLE.values() for task_id in ("T1", "T2", "T3")
                for text, _, scores in tasks.get(task_id, [])
                if not params.candidates.admits_text(text, sample_salience(text, scores, weights))]
    gaps = list(TURN_GAPS) if params.time_unit == "turns" else study_gaps(study)
    return CalibrationReport(
        params, retrieval, embedder.model, day_seconds, pairs, gaps,
        replay_all(traces, params, study, day_seconds=day_seconds),
        replay_all(traces, params, study, day_seconds=day_seconds, reinforcement=False),
        check_candidate_rule(params.candidates), excluded, search, recall_ceilings(traces, params), spread,
        folds if fit else 0, CHECK_GROUP_SIZE if fit else None,
        operating_curve(traces, params, study, day_seconds=day_seconds) if curve else {})


@dataclass(frozen=True)
class PresetCheck:
    """The calibration check of a study's active recall preset (the pre-flight's part (a)), under the decision
    rule of ``recall_calibration_report`` (each language's held-out and blind participants pooled)."""

    preset: str  # active relevance preset name
    embedder_model: str | None  # model the preset was fitted for
    passed: bool
    figures: dict  # JSON-serialisable: {language: {split: {"T2": pct, "T3": pct, "T4": pct, "unrelated_max": pct}}}
    failures: list[str]  # what fails the rule (missed targets, failed shapes), one line each; empty when passed
    # the rule's verdicts, JSON-serialisable (evidence.Verdict.as_dict() with language, group, task, measure):
    targets: list[dict] = field(default_factory=list)  # the pooled groups', which decide
    shape: list[dict] = field(default_factory=list)  # each language's T2-above-T4 difference (pooled)
    groups: list[dict] = field(default_factory=list)  # held-out (open) and blind alone: information only
    within_error: list[str] = field(default_factory=list)  # the pooled targets within error (amber), one line each
    rule: str = "pooled-wilson"  # which rule produced the verdict (older reports have none)


class PresetEmbedderMismatch(Exception):
    """The configured embedder is not the one the preset was fitted for; message names
    `scripts/calibrate_recall.py --fit --write-preset`."""


def check_active_preset(study: Study, embedder) -> PresetCheck:
    """Score the held-out and blind calibration participants with the study's active preset and the given
    embedder, and judge the pre-registered targets on each language's pooled evaluation participants (the decision
    rule; each group alone is reported for information). Raises PresetEmbedderMismatch first if embedder.model differs
    from the preset's embedder_model (presets without embedder_model, e.g. seed_literal, are not refused)."""
    params = study.memory.recall
    fitted_for = params.relevance.embedder_model
    model = getattr(embedder, "model", None)
    if fitted_for is not None and model != fitted_for:
        raise PresetEmbedderMismatch(
            f"recall preset {params.preset!r} was fitted for the embedder {fitted_for!r}, but the configured one is "
            f"{model!r}: its relevance would mean nothing. Refit it for this embedder with "
            f"scripts/calibrate_recall.py --fit --write-preset NAME (and make NAME the study's memory.recall.preset).")
    checked = [p for p in SAMPLE if split_of(p) != "dev"]
    traces = traces_for(study, _memo(embedder), params, study.memory.retrieval, participants=checked)
    return judged_check(params.preset, fitted_for, replay_all(traces, params, study, events=False))


def judged_check(preset: str, embedder_model: str | None, outcomes: Outcomes) -> PresetCheck:
    """The calibration check on replayed outcomes of the evaluation participants: the decision rule on each
    language's pooled groups decides, the held-out (open) and blind groups are judged alone for information."""
    judgements = judge_outcomes(outcomes)
    failures = rule_failures(judgements)
    judged = [by_group[JUDGED_GROUP] for by_group in judgements.values()]
    return PresetCheck(preset=preset, embedder_model=embedder_model, passed=not failures,
                       figures=outcome_figures(outcomes), failures=failures,
                       targets=[t for j in judged for t in j.target_dicts()],
                       shape=[j.shape_dict() for j in judged],
                       groups=[{"language": j.language, "group": j.group, "passed": j.passed,
                                "targets": j.target_dicts(), "shape": j.shape_dict()}
                               for by_group in judgements.values() for j in by_group.values()
                               if j.group != JUDGED_GROUP],
                       within_error=rule_within_error(judgements))


def _rounded(value: Any, digits: int = 4) -> Any:
    """Coefficients to four decimals, as the study file keeps them (r moves by < 1e-3)."""
    if isinstance(value, float):
        return round(value, digits)
    if isinstance(value, dict):
        return {k: _rounded(v, digits) for k, v in value.items()}
    return value


def preset_dict(report: CalibrationReport) -> dict[str, Any]:
    """The fitted preset as it goes into the study definition (``memory.recall.presets.NAME``)."""
    params = report.params
    relevance = params.relevance
    if relevance.method != "anchored" or relevance.model is None:
        raise ValueError("only a fitted (anchored) preset can be written; run with --fit")
    return {
        "time_unit": params.time_unit, "time_scale": params.time_scale,
        "relevance": {"method": "anchored", "false_recall_budget": relevance.false_recall_budget,
                      **({"false_recall_budget_by_language": dict(relevance.budget_by_language)}
                         if relevance.budget_by_language else {}),
                      "anchor_days": relevance.anchor_days, "model": _rounded(relevance.model.to_dict()),
                      "tails": {k: _rounded(t.to_dict()) for k, t in relevance.tails.items()},
                      "embedder_model": relevance.embedder_model, "fitted_for": relevance.fitted_for},
    }


def write_preset(path: Path, name: str, preset: dict[str, Any]) -> None:
    """Put ``preset`` into a JSON or YAML study file as ``memory.recall.presets.<name>`` (created if absent),
    keeping everything else in it."""
    yaml_file = path.suffix in (".yaml", ".yml")
    if yaml_file:
        import yaml

        data = yaml.safe_load(path.read_text(encoding="utf-8")) if path.exists() else {}
    else:
        data = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    data = data or {}
    data.setdefault("memory", {}).setdefault("recall", {}).setdefault("presets", {})[name] = preset
    if yaml_file:
        path.write_text(yaml.safe_dump(data, allow_unicode=True, sort_keys=False), encoding="utf-8")
    else:
        path.write_text(json.dumps(data, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
