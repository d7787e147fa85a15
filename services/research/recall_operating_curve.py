"""What each false-recall budget costs (``scripts/calibrate_recall.py --curve``, docs/recall_calibration.md).

An anchored preset's budget decides where ``r`` crosses the curve's bar: a larger budget recalls more relevant
memories and more unrelated ones. ``operating_curve`` replays the calibration participants of each language
under the preset with only the budget changed (the same model, tails and time unit) and reports, per split,
the relevant memories recalled at each task, the most unrelated candidates recalled at any task, and whether
the decision rule passes (``recall_calibration_rule.judge_group``). It answers "which budget would this
language need for T2's target, and what would it cost in false recalls?": a description of this embedder on these
participants, not a fit (the held-out and blind rows are looked at, so a budget read off them is no longer tested
on them).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from services.platform.clock import SECONDS_PER_DAY
from services.recall.parameters import RecallParams
from services.research.recall_calibration_replay import (
    CHECKED_SPLITS,
    SPLITS,
    TARGETS,
    Trace,
    group_outcomes,
    replay_all,
)
from services.research.recall_calibration_rule import judge_group
from services.study.definition import Study


class NotAnchored(ValueError):
    """The operating curve varies an anchored preset's budget; another relevance has none."""


def require_anchored(params: RecallParams) -> None:
    """Raise NotAnchored unless ``params`` has a budget to vary."""
    if params.relevance.method != "anchored":
        raise NotAnchored(f"the operating curve varies the false-recall budget of an anchored preset; "
                          f"{params.preset!r} is {params.relevance.method!r}")


CURVE_BUDGETS = (0.005, 0.01, 0.02, 0.03, 0.04, 0.05, 0.06, 0.08, 0.10, 0.12, 0.15)


@dataclass(frozen=True)
class CurvePoint:
    """One language under one budget: per split, the relevant shares at each task and the worst unrelated rate
    (fractions), and whether the decision rule passes there (checked splits only: "held-out", which holds the blind
    participants too, is the rule's pooled group; "blind" alone is for information)."""

    budget: float
    shares: dict[str, dict[str, float]]  # split -> task -> relevant recalled / relevant
    unrelated_max: dict[str, float]  # split -> the most unrelated candidates recalled at any task
    met: dict[str, bool]  # checked split -> no target missed and the shape holds (the decision rule)


def operating_curve(traces: list[Trace], params: RecallParams, study: Study, *,
                    budgets: tuple[float, ...] = CURVE_BUDGETS,
                    day_seconds: float = SECONDS_PER_DAY) -> dict[str, list[CurvePoint]]:
    """{language: one CurvePoint per budget, in the order given, leaving out budgets beyond the share the
    language's fitted tail covers}. Needs an anchored preset."""

    require_anchored(params)
    if not all(0.0 < b < 1.0 for b in budgets):
        raise ValueError("a false-recall budget is a share in (0, 1)")
    curve: dict[str, list[CurvePoint]] = {}
    for language in sorted({t.language for t in traces}):
        mine = [t for t in traces if t.language == language]
        # a budget is a quantile of the fitted tail, which covers only its top share of the unrelated scores
        for budget in (b for b in budgets if b < params.relevance.tail(language).share):
            varied = replace(params, relevance=replace(params.relevance, false_recall_budget=budget,
                                                       budget_by_language={}))
            outcomes = replay_all(mine, varied, study, day_seconds=day_seconds, events=False)
            shares, unrelated, met = {}, {}, {}
            for split in SPLITS:
                tasks = group_outcomes(outcomes, split, language)
                if not tasks or not any(o.relevant for o in tasks.values()):
                    continue
                shares[split] = {t: o.relevant_share() for t, o in tasks.items()}
                unrelated[split] = max(o.unrelated_rate() for o in tasks.values())
                if split in CHECKED_SPLITS:  # "held-out" holds the blind ones too: the rule's pooled group
                    met[split] = judge_group(tasks, language, "pooled" if split == "held-out" else split).passed
            curve.setdefault(language, []).append(CurvePoint(budget, shares, unrelated, met))
    return curve


def first_budget_reaching(points: list[CurvePoint], split: str, task_id: str) -> CurvePoint | None:
    """The smallest budget of ``points`` at which ``split`` recalls at least the task's target share of the
    relevant memories at ``task_id``; None when no budget on the curve does."""
    reaching = [p for p in points if split in p.shares and p.shares[split].get(task_id, 0.0) >= TARGETS[task_id]]
    return min(reaching, key=lambda p: p.budget) if reaching else None


def format_curve(curve: dict[str, list[CurvePoint]], params: RecallParams) -> list[str]:
    unit = f"{1 / params.time_scale:g} days" if params.time_unit == "days" else params.time_unit
    out = ["", f"operating curve of preset {params.preset!r} (its model, tails and unit of {unit}; only the "
               "false-recall budget varied; preset's own: "
               + ", ".join(f"{lang} {params.relevance.budget(lang):.1%}" for lang in curve) + "): "
               "relevant recalled T2/T3/T4 % and the most unrelated candidates recalled at any task (u); "
               "* = no target missed and the shape holds (the decision rule)"]
    for language, points in curve.items():
        splits = [s for s in SPLITS if any(s in p.shares for p in points)]
        out.append(f"  {language}  budget  " + "".join(f"{s:>22s}" for s in splits))
        for point in points:
            cells = []
            for split in splits:
                if split not in point.shares:
                    cells.append(f"{'-':>22s}")
                    continue
                shares = "/".join(f"{100 * v:.0f}" for v in point.shares[split].values())
                star = "*" if point.met.get(split) else " "
                cells.append(f"{shares:>12s} u{100 * point.unrelated_max[split]:4.1f}%{star} ")
            out.append(f"      {point.budget:6.1%}  " + "".join(cells))
        for split in CHECKED_SPLITS:
            first = first_budget_reaching(points, split, "T2")
            out.append(f"    {language} {split}: T2 ≥ {TARGETS['T2']:.0%} "
                       + (f"from a {first.budget:.1%} budget on, with up to {first.unrelated_max[split]:.1%} of the "
                          "unrelated candidates recalled" if first else "at no budget on this curve"))
    return out
