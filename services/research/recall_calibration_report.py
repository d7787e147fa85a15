"""What the L4 recall calibration found, and how it is shown (docs/recall_calibration.md):
``CalibrationReport`` with its warnings and issue 27's decision rule on the pre-registered targets
(``judge_outcomes``), the per-task ceilings of single thresholds, the printed report, the plot, and the fitted
preset as it goes into a study file.

The decision rule: each language's evaluation participants (held-out and blind) are pooled, and each pre-registered
target is judged on the pooled counts with ``services.study.evidence``: relevant memories recalled at T2 / T3 / T4
(``TARGETS``), at most ``UNRELATED_MAX`` of the unrelated candidates recalled at each task, and the decay shape, T2
above T4 by more than its error (Newcombe). A target is met, within error (amber) or missed; the check passes when no
target is missed and the shape holds. The held-out (open) and blind groups are judged the same way on their own, for
information only: groups of eight are decided by single items. Used by ``scripts/calibrate_recall.py``, the
pre-flight's ``check_active_preset`` and the operating curve.
"""
from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import groupby
from pathlib import Path
from typing import Any

import numpy as np

from services.platform.clock import SECONDS_PER_DAY
from services.recall.formulas import elapsed_time, final_probability, initial_g, recall_probability, required_relevance
from services.recall.parameters import RecallParams, RetrievalSettings
from services.research.recall_calibration_replay import (
    CHECKED_SPLITS,
    FEATURE_NAMES,
    RULE_CHECK,
    SAMPLE,
    SPLIT_MEMBERS,
    SPLITS,
    TARGETS,
    UNIVERSAL_SHARE,
    UNRELATED_MAX,
    UNRELATED_TOLERANCE,
    MemoryKey,
    Outcomes,
    Query,
    TaskOutcome,
    Trace,
    group_outcomes,
)
from services.research.recall_calibration_rule import (
    EVALUATION_GROUPS,
    GROUP_LABELS,
    JUDGED_GROUP,
    SHAPE,
    Judgement,
    judge_group,
)
from services.research.recall_operating_curve import CurvePoint, format_curve
from services.study import evidence

R_GRID = (0.75, 0.8, 0.85, 0.9, 0.95, 1.0)
# Scores the ceiling is computed for: "r" is the preset's relevance at t = 0 (a monotone function of its
# linear score, so of any r built from the same features), the others raw.
CEILING_SCORES = ("r", "dense_z", "cosine", "fused")


@dataclass(frozen=True)
class Ceiling:
    """The most relevant memories of one task a single threshold on one score recalls while it recalls at
    most UNRELATED_MAX of the task's unrelated candidates."""

    recalled: int
    relevant: int

    def share(self) -> float:
        return self.recalled / self.relevant if self.relevant else 0.0


def recall_ceiling(traces: list[Trace], task_id: str, score: Callable[[Query, dict[str, float]], float]) -> Ceiling:
    """What the best single threshold on ``score`` reaches at ``task_id``, chosen on these very participants
    (an oracle): the most any r that rises with ``score`` alone could recall if every candidate faced the
    same bar. It is not a strict bound on the curve: time and salience give each memory a bar of its own
    (a younger or more salient memory's is lower), which can recall a few memories more or fewer at the
    same unrelated share. A relevant memory counts once however many messages rank it, as in the targets;
    echo pairs (two topic-less messages) are left out, as in the replay."""
    scored: list[tuple[float, MemoryKey | None]] = []
    relevant: set[MemoryKey] = set()
    for trace in traces:
        for query in (q for q in trace.queries if q.task_id == task_id):
            relevant |= {(trace.participant, i) for i in query.relevant}
            scored += [(score(query, scores), (trace.participant, index) if index in query.relevant else None)
                       for index, scores in query.candidates
                       if query.topics or trace.memories[index].topics]
    allowed = UNRELATED_MAX * sum(key is None for _, key in scored)
    recalled: set[MemoryKey] = set()
    unrelated = 0
    for _, group in groupby(sorted(scored, key=lambda item: -item[0]), key=lambda item: item[0]):
        keys = [key for _, key in group]
        unrelated += keys.count(None)
        if unrelated > allowed:
            break
        recalled.update(k for k in keys if k is not None)
    return Ceiling(len(recalled), len(relevant))


def ceiling_score(name: str, params: RecallParams) -> Callable[[Query, dict[str, float]], float]:
    if name != "r":
        return lambda query, scores: scores[name]

    def relevance(query: Query, scores: dict[str, float]) -> float:
        others = {f: np.array([scores[f]]) for f in FEATURE_NAMES if f != "cosine"}
        return float(np.atleast_1d(params.relevance.to_r(np.array([scores["cosine"]]), query.language, others))[0])
    return relevance


Ceilings = dict[tuple[str, str], dict[str, dict[str, Ceiling]]]  # (split, language) -> score -> task -> Ceiling


def recall_ceilings(traces: list[Trace], params: RecallParams) -> Ceilings:
    """The ceiling of every score of CEILING_SCORES, per split (SPLITS), language and task."""
    found: Ceilings = {}
    for split in SPLITS:
        for language in sorted({t.language for t in traces}):
            mine = [t for t in traces if t.language == language and t.split in SPLIT_MEMBERS[split]]
            if mine:
                found[(split, language)] = {name: {task: recall_ceiling(mine, task, ceiling_score(name, params))
                                                   for task in TARGETS} for name in CEILING_SCORES}
    return found


def outcome_figures(outcomes: Outcomes) -> dict[str, dict[str, dict[str, float]]]:
    """{language: {split: {"T2": %, "T3": %, "T4": %, "unrelated_max": %}}} on the checked splits (percent,
    one decimal): the relevant memories recalled at each task and the highest share of unrelated candidates
    recalled at any task."""
    found: dict[str, dict[str, dict[str, float]]] = {}
    for language in sorted({lang for _, lang in outcomes}):
        for split in CHECKED_SPLITS:
            tasks = group_outcomes(outcomes, split, language)
            row = {t: round(100 * tasks[t].relevant_share(), 1) for t in TARGETS if t in tasks}
            row["unrelated_max"] = round(100 * max((o.unrelated_rate() for o in tasks.values()), default=0.0), 1)
            found.setdefault(language, {})[split] = row
    return found


# -- the decision rule: services/research/recall_calibration_rule.py ------------------------------------


def judge_outcomes(outcomes: Outcomes) -> dict[str, dict[str, Judgement]]:
    """{language: {group: Judgement}} for every group of EVALUATION_GROUPS; the rule decides on JUDGED_GROUP."""
    found: dict[str, dict[str, Judgement]] = {}
    for language in sorted({lang for _, lang in outcomes}):
        for group, members in EVALUATION_GROUPS.items():
            mine = {key: tasks for key, tasks in outcomes.items() if key[1] == language and key[0] in members}
            found.setdefault(language, {})[group] = judge_group(group_outcomes(mine), language, group)
    return found


def rule_failures(judgements: dict[str, dict[str, Judgement]]) -> list[str]:
    """What fails the rule: the judged groups' missed targets (or targets without data) and failed shapes."""
    found = []
    for by_group in judgements.values():
        judged = by_group[JUDGED_GROUP]
        found += [evidence.describe(v) for v in judged.missed()]
        if not judged.shape.above:
            found.append(evidence.describe_difference(judged.shape))
    return found


def rule_within_error(judgements: dict[str, dict[str, Judgement]]) -> list[str]:
    """The judged groups' targets within error: amber, they do not fail the check."""
    return [evidence.describe(v) for by_group in judgements.values() for v in by_group[JUDGED_GROUP].within_error()]


def checked_failures(outcomes: Outcomes) -> list[str]:
    """The rule's failures on the pooled evaluation participants of each language (``rule_failures``)."""
    return rule_failures(judge_outcomes(outcomes))


@dataclass
class CalibrationReport:
    params: RecallParams
    retrieval: RetrievalSettings
    embedder_model: str
    day_seconds: float
    pairs: dict[tuple[str, str], dict[str, np.ndarray]]  # (split, language) -> features, "label", "r"
    gaps: list[float]
    outcomes: Outcomes
    without_reinforcement: Outcomes  # the same replay with recall neither resetting t nor raising g
    rule_check: dict[str, dict[str, dict[str, list[str]]]]  # split -> language -> kind -> misjudged messages
    excluded_memories: list[str] = field(default_factory=list)  # sample messages the candidate rule leaves out
    search: list[dict[str, Any]] = field(default_factory=list)  # --fit: the choices tried on dev
    ceilings: Ceilings = field(default_factory=dict)  # the best a threshold on each score can do (recall_ceiling)
    bootstrap: list[dict[str, Any]] = field(default_factory=list)  # --fit --bootstrap N: one row per refit
    folds: int = 0  # --fit: the cross-validation folds the choice was judged on (0: in-sample)
    group_size: int | None = None  # --fit: participants per language in each group drawn (None: all of them)
    curve: dict[str, list[CurvePoint]] = field(default_factory=dict)  # --curve: language -> one point per budget

    def group(self, split: str | None = None, language: str | None = None) -> dict[str, TaskOutcome]:
        return group_outcomes(self.outcomes, split, language)

    @property
    def tasks(self) -> dict[str, TaskOutcome]:
        return self.group()

    @property
    def languages(self) -> list[str]:
        return sorted({lang for _, lang in self.outcomes})

    @property
    def impossible(self) -> bool:
        return all(not outcome.recalled for outcome in self.tasks.values())

    @property
    def universal(self) -> bool:
        return any(o.unrelated_rate() > UNRELATED_TOLERANCE or o.share() >= UNIVERSAL_SHARE
                   or o.relevant_share() >= UNIVERSAL_SHARE
                   for language in self.languages for o in self.group(language=language).values())

    def judgements(self) -> dict[str, dict[str, Judgement]]:
        """The pre-registered targets judged per language and evaluation group (``judge_outcomes``)."""
        return judge_outcomes(self.outcomes)

    def target_failures(self) -> list[str]:
        """What fails the decision rule: missed targets and failed shapes on each language's pooled evaluation
        participants (held-out and blind). ``--strict`` exits 2 on these alone."""
        return rule_failures(self.judgements())

    def within_error(self) -> list[str]:
        """The pooled targets within error (amber): the point estimate on the wrong side, the interval not."""
        return rule_within_error(self.judgements())

    def figures(self) -> dict[str, dict[str, dict[str, float]]]:
        return outcome_figures(self.outcomes)

    def unreachable_targets(self) -> list[str]:
        """Checked targets that no single threshold on any of the scores reaches, even chosen on those very
        participants: a refit of r on these scores is not expected to meet them (per-memory bars from time and
        salience move a ceiling by a few memories, not tens of points)."""
        found = []
        for (split, language), by_score in sorted(self.ceilings.items()):
            for task_id, minimum in TARGETS.items() if split in CHECKED_SPLITS else ():
                best = max(by_score.values(), key=lambda tasks: tasks[task_id].share())[task_id]
                if best.share() < minimum:
                    found.append(f"{split} {language} {task_id}: at most {best.recalled}/{best.relevant} "
                                 f"({best.share():.0%}) of the relevant memories < {minimum:.0%}")
        return found

    def warnings(self) -> list[str]:
        found = []
        if self.impossible:
            found.append("recall is IMPOSSIBLE: no memory is recalled at any task, so L4 equals L3")
        for language in self.languages:
            for task_id, o in self.group(language=language).items():
                if o.unrelated_rate() > UNRELATED_TOLERANCE:
                    found.append(f"recall is UNIVERSAL at {task_id} ({language}): {o.unrelated_recalls} of "
                                 f"{o.unrelated_candidates} unrelated candidates recalled")
                if o.share() >= UNIVERSAL_SHARE or o.relevant_share() >= UNIVERSAL_SHARE:
                    found.append(f"recall is UNIVERSAL at {task_id} ({language}): {o.share():.0%} of memories, "
                                 f"{o.relevant_share():.0%} of relevant ones recalled")
        found += [f"target missed: {f}" for f in self.target_failures()]
        found += [f"within error (does not fail the check): {f}" for f in self.within_error()]
        found += [f"target beyond the best single threshold on these scores: {f}"
                  for f in self.unreachable_targets()]
        if not self.params.relevance.measured_for(self.embedder_model):
            found.append(f"the relevance model was fitted for {self.params.relevance.embedder_model!r}, "
                         f"not for {self.embedder_model!r}: refit with --fit")
        fitted = (self.params.relevance.fitted_for or {}).get("retrieval")
        if fitted and fitted != self.retrieval.to_dict():
            found.append(f"the relevance model was fitted for retrieval settings {fitted}, the study uses "
                         f"{self.retrieval.to_dict()}: refit with --fit")
        return found


def curve_t(params: RecallParams, gap_days: float, day_seconds: float) -> float:
    """t for a gap of ``gap_days`` study days (or turns, when t counts turns)."""
    return float(elapsed_time(gap_days * day_seconds, unit=params.time_unit, time_scale=params.time_scale,
                              day_seconds=day_seconds, turns=gap_days))


def p_table(params: RecallParams, gaps: list[float], *, salience: float = 0.0,
            day_seconds: float = SECONDS_PER_DAY) -> list[dict[str, Any]]:
    """p_final at each gap (days, or turns when t counts turns) for a grid of r, for a never-recalled
    memory with g = g0(salience)."""
    g0 = initial_g(salience, params.g0_base, params.g0_salience)
    rows = []
    for r in R_GRID:
        cells = []
        for gap in gaps:
            p = float(recall_probability(r, curve_t(params, gap, day_seconds), g0))
            p_final = float(final_probability(p, salience, params.salience_bonus))
            cells.append({"gap": gap, "p_final": p_final, "recalled": p_final >= params.threshold})
        rows.append({"r": r, "cells": cells})
    return rows


def _outcome_row(label: str, o: TaskOutcome) -> str:
    return (f"  {label:18s} {o.task_id:4s} {o.memories:8d} {o.memories - o.excluded:10d} {len(o.recalled):8d} "
            f"{o.share():5.0%}  {len(o.relevant):8d} {len(o.relevant_recalled):8d}  {o.relevant_share():5.0%}  "
            f"{len(o.recalled & o.t1_relevant):3d}/{len(o.t1_relevant):<3d} {o.t1_share():4.0%}  "
            f"{o.unrelated_recalls:4d} of {o.unrelated_candidates:3d} {o.unrelated_rate():5.1%}  "
            f"{len(o.recalled & o.unrelated_memories):3d}/{len(o.unrelated_memories):<3d}  "
            f"{len(o.reinforced):4d} {o.echo_recalls:6d}")


def _format_header(report: CalibrationReport, verbose: bool) -> list[str]:
    params = report.params
    out = [f"recall preset: {params.preset}   embedder: {report.embedder_model}",
           f"threshold {params.threshold}  top_k {params.top_k}  bonus {params.salience_bonus}  "
           f"g0 = {params.g0_base} + {params.g0_salience}·e  g += S(t)·(1 + {params.g_update_salience}·e)",
           f"t = study {params.time_unit} × {params.time_scale:.4g}"
           + (f" (one curve unit = {1 / params.time_scale:g} days)" if params.time_unit == "days" else ""),
           f"relevance: {params.relevance.method} {json.dumps(params.relevance.to_dict(), ensure_ascii=False)}",
           f"candidates: hybrid retriever {report.retrieval.to_dict()}; rule {params.candidates.to_dict()}", ""]
    stored = sum(len(tasks.get(t, [])) for tasks in SAMPLE.values() for t in ("T1", "T2", "T3"))
    out.append(f"candidate rule: {len(report.excluded_memories)} of the sample's {stored} stored messages are not "
               "recall candidates" + (": " + " | ".join(report.excluded_memories) if verbose else ""))
    for split, languages in report.rule_check.items():
        for language, misjudged in languages.items():
            content_free, content = RULE_CHECK[split][language]
            out.append(f"  {split:8s} {language}: content-free messages excluded "
                       f"{len(content_free) - len(misjudged['content_free_kept'])}/{len(content_free)}, "
                       f"messages with content kept {len(content) - len(misjudged['content_dropped'])}/{len(content)}"
                       + (f"  misjudged: {misjudged['content_free_kept'] + misjudged['content_dropped']}"
                          if verbose and any(misjudged.values()) else ""))
    return out


def _format_pairs(report: CalibrationReport) -> list[str]:
    x_star = float(required_relevance(0.0, report.params.g0_base, 0.0, report.params.threshold,
                                      report.params.salience_bonus))
    out = ["", f"labelled (message, top-{report.params.top_k} candidate) pairs (held-out: the first rounds', the blind "
               f"apart): r = the preset's relevance; r ≥ {x_star:.3f} is recalled at t = 0 (e = 0)"]
    for (split, language), data in sorted(report.pairs.items()):
        label = data["label"] == 1
        pos, neg = data["fused"][label], data["fused"][~label]
        auc = float((pos[:, None] > neg[None, :]).mean() + 0.5 * (pos[:, None] == neg[None, :]).mean()) \
            if pos.size and neg.size else float("nan")
        out.append(f"  {language} {split:8s} related {int(label.sum()):4d} "
                   f"(median r {np.median(data['r'][label]):.2f}, "
                   f"r ≥ x* {np.mean(data['r'][label] >= x_star):4.0%})  unrelated {int((~label).sum()):4d} "
                   f"(median r {np.median(data['r'][~label]):.2f}, r ≥ x* {np.mean(data['r'][~label] >= x_star):4.1%})"
                   f"  fused-score AUC {auc:.3f}")
    return out


def _format_curve(report: CalibrationReport) -> list[str]:
    params = report.params
    unit = "turns" if params.time_unit == "turns" else "days"
    out = ["", f"p_final for a never-recalled memory (e = 0, g = {params.g0_base}); "
               f"* = recalled (≥ {params.threshold})",
           "     r  " + "".join(f"{gap:>5g} {unit[0]} " for gap in report.gaps)]
    for row in p_table(params, report.gaps, day_seconds=report.day_seconds):
        out.append(f"  {row['r']:4.2f}  " + "".join(f"{c['p_final']:6.3f}{'*' if c['recalled'] else ' '} "
                                                   for c in row["cells"]))
    out += ["", "r needed for recall (never-recalled memory, g = g0(e)); above 1 = impossible",
            "     e    g0  " + "".join(f"{gap:>6g} {unit[0]}" for gap in report.gaps)]
    for e in (0.0, 0.5, 1.0):
        g0 = float(initial_g(e, params.g0_base, params.g0_salience))
        needed = [float(required_relevance(curve_t(params, gap, report.day_seconds), g0, e, params.threshold,
                                           params.salience_bonus)) for gap in report.gaps]
        out.append(f"  {e:4.1f}  {g0:4.2f}  " + "".join(f"{r:8.3f}" if r < 100 else f"{'>100':>8s}" for r in needed))
    return out


def _format_outcomes(report: CalibrationReport) -> list[str]:
    out = ["", "simulated schedule (T1 day 0, T2 day 2, T3 day 9, T4 day 16; dev = participants the model and the "
               "time unit were chosen on; held-out includes the blind ones)",
           f"  {'participants':18s} task memories candidates recalled share  relevant recalled  share  "
           "T1-relevant recalled  unrelated (per candidate)  unrel.memories  reinf. echoes"]
    for split in SPLITS:
        for language in report.languages:
            out += [_outcome_row(f"{split} {language}", o) for o in report.group(split, language).values()]
    out += ["", "reinforcement: relevant memories recalled, with recall resetting t and raising g / without "
                "(every memory ages from its creation)"]
    for split in SPLITS:
        for language in report.languages:
            with_ = report.group(split, language)
            without = group_outcomes(report.without_reinforcement, split, language)
            out.append(f"  {split:8s} {language}  " + "  ".join(
                f"{t} {len(with_[t].relevant_recalled)}/{len(with_[t].relevant)} vs "
                f"{len(without[t].relevant_recalled)}/{len(without[t].relevant)}" for t in with_))
    return out + format_judgements(report.judgements())


def format_judgements(judgements: dict[str, dict[str, Judgement]]) -> list[str]:
    """The decision rule's lines: each language's pooled verdicts and shape, then each group on its own."""
    out = ["", "pre-registered targets, judged on each language's held-out and blind participants pooled (one-sided "
               "95% Wilson bounds: met / within error / missed): relevant recalled ≥ "
           + " / ".join(f"{t} {v:.0%}" for t, v in TARGETS.items())
           + f"; unrelated candidates recalled ≤ {UNRELATED_MAX:.0%} at each task; {SHAPE[0]} above {SHAPE[1]} by "
             "more than its error. The check passes when no target is missed and the shape holds."]
    for language, by_group in judgements.items():
        judged = by_group[JUDGED_GROUP]
        out.append(f"  {language} ({GROUP_LABELS[JUDGED_GROUP]}): " + ("PASSED" if judged.passed else "FAILED"))
        out += [f"    {evidence.describe(v)}" for v in judged.targets]
        out.append(f"    {evidence.describe_difference(judged.shape)}")
    out.append("  each group on its own (for information; the rule does not decide on these):")
    for language, by_group in judgements.items():
        for group, judgement in by_group.items():
            if group == JUDGED_GROUP:
                continue
            counts = {v: sum(t.verdict == v for t in judgement.targets) for v in evidence.VERDICTS}
            out.append(f"  {language} {GROUP_LABELS[group]}: " + ", ".join(
                f"{n} {v.replace('_', ' ')}" for v, n in counts.items() if n)
                + ("; shape holds" if judgement.shape.above else "; shape NOT above its error"))
            out += [f"    {evidence.describe(v)}" for v in judgement.targets if v.verdict != "met"]
    return out


def _format_ceilings(report: CalibrationReport) -> list[str]:
    out = ["", f"ceiling per task: the most relevant memories one threshold on a score recalls while recalling at most "
               f"{UNRELATED_MAX:.0%} of the task's unrelated candidates, the threshold chosen on these very "
               "participants (no time, no salience; not a strict bound: time and salience give each memory its "
               "own bar) (r: this preset's relevance)"]
    for (split, language), by_score in sorted(report.ceilings.items()):
        for name, tasks in by_score.items():
            out.append(f"  {split:8s} {language}  {name:8s} " + "   ".join(
                f"{t} {c.recalled:2d}/{c.relevant:<2d} {c.share():4.0%}" for t, c in tasks.items()))
    unreachable = report.unreachable_targets()
    out.append("  checked targets within reach of some score" if not unreachable else
               "  BEYOND ONE THRESHOLD: " + "; ".join(unreachable))
    return out


def _format_events(report: CalibrationReport) -> list[str]:
    out = []
    for task_id, o in report.tasks.items():
        out.append(f"\n  {task_id} candidates")
        for ev in o.events:
            tag = "rel" if ev["relevant"] else "echo" if ev["echo"] else ""
            out.append(f"    {'RECALL' if ev['recalled'] else '      '} {tag:4s} {ev['participant']:4s} "
                       f"fused {ev['fused']:5.2f} cos {ev['cosine']:.3f} r {ev['r']:.2f} t {ev['t']:.3f} "
                       f"g {ev['g_before']:.2f}→{ev['g_after']:.2f} pf {ev['p_final']:.3f}  "
                       f"{ev['query'][:24]} | {ev['memory'][:24]}")
    return out


def format_report(report: CalibrationReport, *, verbose: bool = False) -> str:
    out = _format_header(report, verbose) + _format_pairs(report) + _format_curve(report)
    out += _format_search(report) + _format_outcomes(report) + _format_ceilings(report)
    out += format_curve(report.curve, report.params) if report.curve else []
    return "\n".join(out + (_format_events(report) if verbose else []))


def budgets_text(budgets: dict[str, float]) -> str:
    """"zh 0.04, en 0.03", or "0.03" when every language has the same budget."""
    if len(set(budgets.values())) == 1:
        return f"{next(iter(budgets.values())):g}"
    return ", ".join(f"{lang} {b:g}" for lang, b in sorted(budgets.items()))


def _search_line(row: dict[str, Any], chosen: bool) -> str:
    shares = "  ".join(f"{lang} " + "/".join(f"{v:.0%}" for v in s.values()) for lang, s in row["shares"].items())
    budgets = " ".join(f"{lang} {b:5.3f}" for lang, b in sorted(row["budgets"].items()))
    return (f"  {'->' if chosen else '  '} budget {budgets}  1 unit = {row['days_per_unit']:>4g} d  "
            f"{shares}  max unrelated {row['unrelated']:.1%}  shape and unrelated hold in {row['p_first']:4.0%} of "
            f"dev resamples, every target in {row['p_all']:4.0%} ("
            + ", ".join(f"{lang} {p:.0%}" for lang, p in sorted(row["p_met"].items()))
            + f"), score {row['score']:.3f} (partial {row['partial']:.3f})")


def _format_search(report: CalibrationReport) -> list[str]:
    if not report.search:
        return []
    relevance = report.params.relevance
    days = 1.0 / report.params.time_scale
    chosen = {lang: relevance.budget(lang) for lang in report.search[0]["budgets"]}
    per_language = any(len(set(row["budgets"].values())) > 1 for row in report.search)
    judged = (f"on out-of-fold counts ({report.folds} folds: each participant replayed under a model fitted without "
              f"them) over" if report.folds else "over")
    drawn = f"groups of {report.group_size} per language drawn" if report.group_size else "bootstrap resamples"
    rule = ("a budget per language; score = how often a language's group meets every target (the shape, "
            f"≤ {UNRELATED_MAX:.0%} unrelated at every task, each share), mean over languages; partial = the "
            "worst share/target (capped at 1) where the shape and the bound hold, breaking ties" if per_language else
            f"one budget for every language; score = the shape first with ≤ {UNRELATED_MAX:.0%} unrelated at every "
            "task gating each group, then its worst share/target (capped at 1), mean over groups")
    out = ["", f"--fit on the development participants (relevant recalled T2 / T3 / T4 per language), judged {judged} "
               f"{drawn} from them ({rule}); the highest score wins; chosen: "
               f"budget {budgets_text(chosen)}, 1 unit = {days:g} days", "  the chosen budget, every unit:"]
    out += [_search_line(row, row["days_per_unit"] == days) for row in report.search if row["budgets"] == chosen]
    # per language: that language's budgets, the others' held at their choice; one budget: every budget
    for language in chosen if per_language else (None,):
        out.append(f"  the chosen unit, every {language} budget (the others' held at their choice):" if language
                   else "  the chosen unit, every budget:")
        out += [_search_line(row, row["budgets"] == chosen) for row in report.search
                if row["days_per_unit"] == days
                and (language is None
                     or all(b == chosen[lang] for lang, b in row["budgets"].items() if lang != language))]
    out.append("  unrelated-score tails (dev): " + "; ".join(
        f"{lang}: above {tail.threshold:.2f} {tail.share:.0%}, scale {tail.scale:.2f}, shape {tail.shape:.3f}, "
        f"anchor s = "
        f"{relevance.anchor_score(None if lang == 'default' else lang):.2f}" for lang, tail in relevance.tails.items())
        + f"; the anchor's r = {relevance.anchor_r:.3f} (bar of a neutral memory {relevance.anchor_days:g} days old)")
    return out + _format_bootstrap(report)


def _spread(values: list[float], percent: bool = True) -> str:
    low, mid, high = float(np.min(values)), float(np.median(values)), float(np.max(values))
    return f"{low:.0%} / {mid:.0%} / {high:.0%}" if percent else f"{low:g} / {mid:g} / {high:g}"


def _format_bootstrap(report: CalibrationReport) -> list[str]:
    rows = report.bootstrap
    if not rows:
        return []
    units = sorted({row["days_per_unit"] for row in rows})
    languages = sorted(rows[0]["budgets"])
    budgets = "; ".join(f"{lang} " + ", ".join(f"{b:g}" for b in sorted({r["budgets"][lang] for r in rows}))
                        for lang in languages)
    out = ["", f"stability: refit on {len(rows)} bootstrap resamples of the development participants "
               f"(per language, with replacement)",
           f"  chosen unit (days): {', '.join(f'{u:g}' for u in units)} (min / median / max "
           f"{_spread([r['days_per_unit'] for r in rows], percent=False)}); chosen budgets: {budgets}",
           "  relevant recalled under the refits, min / median / max:"]
    for group in rows[0]["shares"]:
        out.append(f"  {group:12s} " + "   ".join(
            f"{task} {_spread([r['shares'][group][task] for r in rows])}" for task in rows[0]["shares"][group]))
    return out


def save_plot(report: CalibrationReport, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    params = report.params
    fig, (curves, bars) = plt.subplots(1, 2, figsize=(11, 4.2))
    unit = "turns" if params.time_unit == "turns" else "days"
    span = np.linspace(0, max(report.gaps) if report.gaps else 1.0, 200)
    t = elapsed_time(span * SECONDS_PER_DAY, unit=params.time_unit, time_scale=params.time_scale,
                     day_seconds=SECONDS_PER_DAY, turns=span)
    for r, g in ((1.0, 2.0), (1.0, 1.0), (0.95, 1.0), (0.9, 1.0), (0.8, 1.0)):
        curves.plot(span, recall_probability(r, t, g), label=f"r {r:.2f}, g {g:.1f}")
    curves.axhline(params.threshold, color="black", linestyle="--", linewidth=1, label="threshold")
    for gap in report.gaps:
        curves.axvline(gap, color="grey", alpha=0.2)
    curves.set(xlabel=f"gap since creation or last recall ({unit})", ylabel="p (e = 0)", ylim=(0, 1.02),
               title=f"forgetting curve, preset {params.preset}")
    curves.legend(fontsize=7)
    task_ids = list(report.tasks)
    x = np.arange(len(task_ids))
    series = [(f"relevant, {split} {lang}", report.group(split, lang))
              for split in CHECKED_SPLITS for lang in report.languages]
    width = 0.8 / max(len(series), 1)
    for i, (label, outcomes) in enumerate(series):
        bars.bar(x - 0.4 + (i + 0.5) * width, [outcomes[k].relevant_share() for k in task_ids], width, label=label)
    bars.step(np.arange(len(TARGETS) + 1) - 0.5, list(TARGETS.values()) + [list(TARGETS.values())[-1]],
              where="post", color="red", linestyle=":", label="target")
    bars.set(xticks=x, xticklabels=task_ids, ylim=(0, 1), ylabel="share recalled during the task",
             title="sample conversations, simulated schedule")
    bars.legend(fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
