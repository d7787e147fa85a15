"""The pre-registered analysis, from the rows of a data export: CONSORT counts, differential attrition, scale
scores and their mixed models, and the manipulation checks (exposure, recall events, reply timing, ``mc_1``).

This module is the analysis itself, shipped unchanged in the pre-registration bundle (``prereg.py``), so it
imports nothing from the project: the standard library, numpy, scipy and statsmodels only. Its input is what the
export writes: each CSV file as a list of ``{column: text}`` rows (``csv.DictReader``) and ``study_config.json``
as a mapping; run on the same export it gives the same numbers in the report and in the bundle's script.

The outcome model, per scale (an instrument's rating items, likert or IOS, averaged per participant and task):
``score ~ condition * task + (1 | participant)``, fitted by REML (statsmodels ``MixedLM``). A contrast
``C-R`` (R the reference condition, ``report.reference_condition`` of the study definition) is the difference of
the model's cell means averaged over the scale's tasks, with a Wald 95 % interval and p; its standardised size is
the estimate over the model's total standard deviation (random intercept and residual). A scale asked at one
task only has one score per participant: it is fitted by ordinary least squares, ``score ~ condition``
(t-based interval). Where no model can be fitted (one condition, too few participants, an empty condition x
task cell, a singular design) the scale gets a message instead of figures, never an exception.
"""
from __future__ import annotations

import math
import warnings
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
from scipy import stats

RATING_TYPES = ("likert", "ios")
MIN_PER_CONDITION = 3  # participants with a score, per condition, before a scale's model is fitted
DEFAULT_EXCLUDE = ("attention_failures",)
MC_ITEM = "mc_1"  # the self-reported manipulation check ("the assistant remembered what I told it earlier")
LATENCY_COLUMNS = ("model_first_token_ms", "model_total_ms", "pacing_delay_ms", "visible_first_token_ms")
EXPOSURE_COLUMNS = ("exposure_replies", "exposure_messages_mean", "exposure_profile_share", "exposure_tokens_mean")
FISHER_RESAMPLES, FISHER_SEED = 100_000, 0  # Monte Carlo p of the Freeman-Halton test: reproducible, +-0.002
FIT_METHODS = ("bfgs", "lbfgs", "cg", "powell")  # statsmodels' optimisers, tried in this order
SINGULAR_SHARE = 1e-6  # a random-intercept variance below this share of the residual's is a boundary fit

Rows = Sequence[Mapping[str, str]]


# -- reading cells ------------------------------------------------------------------------------------------


def number(text: Any) -> float | None:
    """A CSV cell as a float; None for an empty cell or text that is not a number."""
    if text is None or isinstance(text, bool):
        return None
    if isinstance(text, int | float):
        return float(text)
    try:
        value = float(str(text).strip().lstrip("'"))
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def truthy(text: Any) -> bool:
    return str(text).strip().lower() in ("1", "true", "yes")


def _round(value: float | None) -> float | None:
    """A plain float for JSON (None for a missing or non-finite value); never rounded: the bundle's script
    compares to the last digits."""
    return None if value is None or not math.isfinite(value) else float(value)


# -- the study definition -----------------------------------------------------------------------------------


def conditions(study: Mapping[str, Any]) -> list[str]:
    return list(study["enabled_conditions"])


def reference_condition(study: Mapping[str, Any]) -> str:
    return (study.get("report") or {}).get("reference_condition") or conditions(study)[0]


def exclude_flags(study: Mapping[str, Any]) -> list[str]:
    report = study.get("report") or {}
    return list(report["exclude_flags"]) if "exclude_flags" in report else list(DEFAULT_EXCLUDE)


def task_ids(study: Mapping[str, Any]) -> list[str]:
    return [task["id"] for task in study["tasks"]]


def scales(study: Mapping[str, Any]) -> dict[str, list[str]]:
    """instrument -> its rating items' ids, for every instrument that has rating items."""
    found = {}
    for name, instrument in study["instruments"].items():
        items = [item["id"] for item in instrument["items"] if item.get("type", "likert") in RATING_TYPES]
        if items:
            found[name] = items
    return found


# -- CONSORT and attrition ----------------------------------------------------------------------------------


def excluded(participants: Rows, study: Mapping[str, Any]) -> dict[str, list[str]]:
    """participant_code -> the quality flags (``report.exclude_flags``) that exclude them from the outcomes."""
    flags = exclude_flags(study)
    out = {}
    for row in participants:
        hit = [flag for flag in flags if (number(row.get(flag)) or 0) > 0]
        if hit:
            out[row["participant_code"]] = hit
    return out


def _group(row: Mapping[str, str]) -> str:
    return row.get("memory_group") or "unassigned"


def consort(participants: Rows, task_sessions: Rows, study: Mapping[str, Any]) -> dict[str, Any]:
    """Counts by condition: consented, assigned, started and completed each task, withdrawn, erased, excluded."""
    tasks = task_ids(study)
    started = {(row["participant_code"], row["task_id"]) for row in task_sessions}
    flagged = excluded(participants, study)
    groups = [*conditions(study), *sorted({_group(r) for r in participants} - set(conditions(study)))]
    by_condition: dict[str, Any] = {}
    for group in groups:
        rows = [r for r in participants if _group(r) == group]
        if not rows and group not in conditions(study):
            continue
        by_condition[group] = {
            "consented": sum(1 for r in rows if r.get("consent_at") or r.get("erased_at")),
            "assigned": sum(1 for r in rows if r.get("memory_group")),
            "tasks": {t: {"started": sum(1 for r in rows if (r["participant_code"], t) in started),
                          "completed": sum(1 for r in rows if r.get(f"{t}_completed_at"))} for t in tasks},
            "withdrawn": sum(1 for r in rows if r.get("status") == "withdrawn"),
            "erased": sum(1 for r in rows if r.get("status") == "erased"),
            "excluded": sum(1 for r in rows if r["participant_code"] in flagged),
            "excluded_by_flag": {flag: sum(1 for r in rows if flag in flagged.get(r["participant_code"], []))
                                 for flag in exclude_flags(study)},
        }
    return {"by_condition": by_condition, "tasks": tasks, "exclude_flags": exclude_flags(study)}


def attrition(participants: Rows, study: Mapping[str, Any]) -> dict[str, Any]:
    """Differential attrition: assigned participants who completed the last task or not, by condition; chi-square
    when every expected count is at least 5, else Fisher's exact test (for more than two conditions the
    Freeman-Halton extension, its p from FISHER_RESAMPLES tables drawn with a fixed seed)."""
    last = task_ids(study)[-1]
    table = []
    names = []
    for group in conditions(study):
        rows = [r for r in participants if r.get("memory_group") == group]
        if rows:
            done = sum(1 for r in rows if r.get(f"{last}_completed_at"))
            names.append(group)
            table.append([done, len(rows) - done])
    result: dict[str, Any] = {"outcome": f"completed {last}", "conditions": names,
                              "completed": {g: row[0] for g, row in zip(names, table, strict=True)},
                              "not_completed": {g: row[1] for g, row in zip(names, table, strict=True)}}
    if len(table) < 2:
        return {**result, "test": None, "p": None, "code": "one_condition",
                "message": "not tested: fewer than two conditions with data"}
    array = np.array(table)
    if array[:, 0].sum() == 0 or array[:, 1].sum() == 0:
        return {**result, "test": None, "p": 1.0, "code": "no_variation",
                "message": "no difference to test: every condition has the same outcome for everyone"}
    expected = array.sum(axis=1, keepdims=True) * array.sum(axis=0, keepdims=True) / array.sum()
    if expected.min() >= 5:
        chi2, p, dof, _ = stats.chi2_contingency(array, correction=False)
        return {**result, "test": "chi-square", "statistic": _round(chi2), "df": int(dof), "p": _round(p)}
    if len(table) == 2:
        return {**result, "test": "fisher-exact", "p": _round(float(stats.fisher_exact(array).pvalue))}
    # scipy draws tables for more than two rows: a fixed seed keeps the report and the bundle's script equal
    method = stats.MonteCarloMethod(n_resamples=FISHER_RESAMPLES, rng=np.random.default_rng(FISHER_SEED))
    p = float(stats.fisher_exact(array, method=method).pvalue)
    return {**result, "test": "fisher-freeman-halton", "p": _round(p), "resamples": FISHER_RESAMPLES,
            "seed": FISHER_SEED}


# -- scores and descriptives --------------------------------------------------------------------------------


def scale_scores(answers: Rows, study: Mapping[str, Any], *, exclude: Iterable[str] = ()
                 ) -> dict[str, list[tuple[str, str, str, float]]]:
    """scale -> [(participant_code, condition, task_id, score)]: the mean of the scale's rating items a
    participant answered at a task, in the order of the export's rows; excluded participants, and any in a
    condition the study no longer enables, left out."""
    item_scale = {item: name for name, items in scales(study).items() for item in items}
    skip, enabled = set(exclude), set(conditions(study))
    values: dict[tuple[str, str, str, str], list[float]] = defaultdict(list)
    for row in answers:
        name = item_scale.get(row.get("item_id", ""))
        value = number(row.get("value"))
        if name is None or value is None or row["participant_code"] in skip or row.get("memory_group") not in enabled:
            continue
        values[(name, row["participant_code"], row["memory_group"], row["task_id"])].append(value)
    out: dict[str, list[tuple[str, str, str, float]]] = {name: [] for name in scales(study)}
    for (name, code, group, task), found in values.items():
        out[name].append((code, group, task, sum(found) / len(found)))
    return out


def describe(values: Sequence[float]) -> dict[str, Any]:
    """n, mean, sd and the 95 % t interval of the mean (no interval for n < 2)."""
    n = len(values)
    if n == 0:
        return {"n": 0, "mean": None, "sd": None, "ci_low": None, "ci_high": None}
    mean = float(np.mean(values))
    if n < 2:
        return {"n": 1, "mean": _round(mean), "sd": None, "ci_low": None, "ci_high": None}
    sd = float(np.std(values, ddof=1))
    half = float(stats.t.ppf(0.975, n - 1)) * sd / math.sqrt(n)
    return {"n": n, "mean": _round(mean), "sd": _round(sd), "ci_low": _round(mean - half),
            "ci_high": _round(mean + half)}


def descriptives(scores: list[tuple[str, str, str, float]], study: Mapping[str, Any]) -> dict[str, Any]:
    cells: dict[tuple[str, str], list[float]] = defaultdict(list)
    for _, group, task, score in scores:
        cells[(group, task)].append(score)
    return {group: {task: describe(cells[(group, task)]) for task in task_ids(study) if cells.get((group, task))}
            for group in conditions(study) if any(g == group for g, _ in cells)}


# -- the outcome models -------------------------------------------------------------------------------------


class NotFitted(Exception):
    """Why a scale's model cannot be fitted: ``code`` and ``params`` for the report's translations, the English
    message as the exception's text."""

    def __init__(self, code: str, message: str, **params: Any) -> None:
        super().__init__(message)
        self.code, self.params = code, params

    def view(self, scale: str, observations: int) -> dict[str, Any]:
        return {"scale": scale, "status": "not_fitted", "code": self.code, "params": self.params,
                "message": str(self), "n_observations": observations}


def _design(scores: list[tuple[str, str, str, float]], groups: list[str], tasks: list[str]) -> np.ndarray:
    """Intercept, condition dummies, task dummies and their products (reference: groups[0], tasks[0])."""
    columns = [np.ones(len(scores))]
    cond = {g: np.array([1.0 if s[1] == g else 0.0 for s in scores]) for g in groups[1:]}
    task = {t: np.array([1.0 if s[2] == t else 0.0 for s in scores]) for t in tasks[1:]}
    columns += list(cond.values()) + list(task.values())
    columns += [cond[g] * task[t] for g in groups[1:] for t in tasks[1:]]
    return np.column_stack(columns)


def _contrast_vector(k: int, groups: list[str], tasks: list[str], group: str, at: list[str]) -> np.ndarray:
    """The fixed-effect weights of mean(cell(group, t) - cell(reference, t)) over the tasks ``at``."""
    vector = np.zeros(k)
    gi = groups.index(group) - 1
    vector[1 + gi] = 1.0
    base = 1 + (len(groups) - 1) + (len(tasks) - 1)
    for t in at:
        ti = tasks.index(t)
        if ti > 0:
            vector[base + gi * (len(tasks) - 1) + ti - 1] += 1.0 / len(at)
    return vector


def _checked(scores: list[tuple[str, str, str, float]], study: Mapping[str, Any]
             ) -> tuple[list[str], list[str], dict[str, int]]:
    reference = reference_condition(study)
    people: dict[str, set[str]] = defaultdict(set)
    for code, group, _, _ in scores:
        people[group].add(code)
    groups = [g for g in conditions(study) if people.get(g)]
    counts = {g: len(people[g]) for g in groups}
    if reference not in groups:
        raise NotFitted("no_reference", f"no scores in the reference condition {reference}", reference=reference)
    if len(groups) < 2:
        raise NotFitted("one_condition", f"one condition only ({groups[0]}): nothing to compare",
                        condition=groups[0])
    few = [g for g in groups if counts[g] < MIN_PER_CONDITION]
    if few:
        raise NotFitted("too_few", f"too few participants: {', '.join(f'{g} n={counts[g]}' for g in few)} "
                        f"(at least {MIN_PER_CONDITION} per condition)",
                        counts=", ".join(f"{g} n={counts[g]}" for g in few), minimum=MIN_PER_CONDITION)
    groups = [reference, *[g for g in groups if g != reference]]
    present = {(s[1], s[2]) for s in scores}
    tasks = [t for t in task_ids(study) if any(s[2] == t for s in scores)]
    empty = [f"{g} x {t}" for g in groups for t in tasks if (g, t) not in present]
    if empty:
        raise NotFitted("empty_cells", f"empty condition x task cell(s): {', '.join(empty)}", cells=", ".join(empty))
    return groups, tasks, counts


def _fit_mixed(y: np.ndarray, x: np.ndarray, people: np.ndarray) -> tuple[Any, list[str]]:
    import statsmodels.api as sm

    notes: list[str] = []
    result, failures = None, []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for method in FIT_METHODS:  # the first optimiser that converges; one that fails does not end the search
            try:
                fitted = sm.MixedLM(y, x, groups=people).fit(reml=True, method=method)
            except (np.linalg.LinAlgError, ValueError) as exc:
                failures.append(f"{method}: {exc}")
                continue
            if fitted.converged:
                result = fitted
                break
            failures.append(f"{method}: did not converge")
    if result is None:
        raise NotFitted("not_converged", f"the mixed model could not be fitted ({'; '.join(failures)})",
                        detail="; ".join(failures))
    tau2, sigma2 = float(np.asarray(result.cov_re)[0, 0]), float(result.scale)
    if tau2 <= SINGULAR_SHARE * sigma2:
        notes.append("singular fit: the random-intercept variance is estimated at 0 (estimates equal those of "
                     "a model without it)")
    if not notes:  # statsmodels' own warnings, unless they only repeat the boundary fit named above
        notes += sorted({f"statsmodels: {str(w.message).splitlines()[0]}" for w in caught
                         if "converge" in str(w.message).lower() or "boundary" in str(w.message).lower()})
    return result, notes


def fit_scale(scale: str, scores: list[tuple[str, str, str, float]], study: Mapping[str, Any]) -> dict[str, Any]:
    """The scale's model: ``{"scale", "status": "fitted", "model", "contrasts", "by_task", "notes", ...}`` or
    ``{"scale", "status": "not_fitted", "message"}``."""
    try:
        groups, tasks, counts = _checked(scores, study)
    except NotFitted as exc:
        return exc.view(scale, len(scores))
    y = np.array([s[3] for s in scores])
    x = _design(scores, groups, tasks)
    if np.linalg.matrix_rank(x) < x.shape[1]:
        return NotFitted("singular_design", "the design is singular (conditions and tasks are confounded in these "
                         "data)").view(scale, len(scores))
    if len(tasks) == 1:
        return _ols(scale, y, x, groups, tasks, counts)
    people = np.array([s[0] for s in scores])
    try:
        result, notes = _fit_mixed(y, x, people)
    except NotFitted as exc:
        return exc.view(scale, len(scores))
    k = x.shape[1]
    beta = np.asarray(result.fe_params)
    cov = np.asarray(result.cov_params())[:k, :k]
    tau2, sigma2 = float(np.asarray(result.cov_re)[0, 0]), float(result.scale)
    sd = math.sqrt(max(tau2, 0.0) + sigma2)

    def contrast(group: str, at: list[str]) -> dict[str, Any]:
        vector = _contrast_vector(k, groups, tasks, group, at)
        estimate = float(vector @ beta)
        se = math.sqrt(float(vector @ cov @ vector))
        z = estimate / se if se > 0 else float("inf")
        return {"estimate": _round(estimate), "se": _round(se), "ci_low": _round(estimate - 1.959963984540054 * se),
                "ci_high": _round(estimate + 1.959963984540054 * se), "p": _round(2 * stats.norm.sf(abs(z))),
                "effect_size": _round(estimate / sd) if sd > 0 else None}

    return {"scale": scale, "status": "fitted", "model": "mixed", "formula": "score ~ condition * task + "
            "(1 | participant), REML", "tasks": tasks, "reference": groups[0], "notes": notes,
            "n_observations": len(scores), "n_participants": int(sum(counts.values())),
            "random_intercept_variance": _round(tau2), "residual_variance": _round(sigma2),
            "contrasts": [{"contrast": f"{g}-{groups[0]}", "n": counts[g] + counts[groups[0]], **contrast(g, tasks)}
                          for g in groups[1:]],
            "by_task": [{"contrast": f"{g}-{groups[0]}", "task": t, **contrast(g, [t]),
                         "n": sum(1 for s in scores if s[2] == t and s[1] in (g, groups[0]))}
                        for g in groups[1:] for t in tasks]}


def _ols(scale: str, y: np.ndarray, x: np.ndarray, groups: list[str], tasks: list[str], counts: dict[str, int]
         ) -> dict[str, Any]:
    import statsmodels.api as sm

    result = sm.OLS(y, x).fit()
    if result.df_resid < 1:
        return NotFitted("too_few_for_parameters", "too few participants for the model's parameters").view(
            scale, len(y))
    sd = math.sqrt(float(result.scale))
    low, high = np.asarray(result.conf_int(0.05)).T
    rows = []
    for gi, group in enumerate(groups[1:], start=1):
        estimate = float(result.params[gi])
        rows.append({"contrast": f"{group}-{groups[0]}", "n": counts[group] + counts[groups[0]],
                     "estimate": _round(estimate), "se": _round(float(result.bse[gi])), "ci_low": _round(low[gi]),
                     "ci_high": _round(high[gi]), "p": _round(float(result.pvalues[gi])),
                     "effect_size": _round(estimate / sd) if sd > 0 else None})
    return {"scale": scale, "status": "fitted", "model": "ols", "formula": f"score ~ condition (one task: {tasks[0]})",
            "tasks": tasks, "reference": groups[0], "notes": [], "n_observations": len(y),
            "n_participants": int(sum(counts.values())), "residual_variance": _round(float(result.scale)),
            "contrasts": rows, "by_task": [{**row, "task": tasks[0]} for row in rows]}


def outcomes(answers: Rows, participants: Rows, study: Mapping[str, Any]) -> dict[str, Any]:
    """Every scale: descriptives by condition x task and its model; ``table`` is the outcome list
    ``{scale, contrast, task, estimate, ci_low, ci_high, p, n, effect_size}`` (task "all": averaged over tasks)."""
    skip = excluded(participants, study)
    scores = scale_scores(answers, study, exclude=skip)
    models = [fit_scale(name, rows, study) for name, rows in scores.items()]
    table = [{"scale": m["scale"], "contrast": c["contrast"], "task": "all", "estimate": c["estimate"],
              "ci_low": c["ci_low"], "ci_high": c["ci_high"], "p": c["p"], "n": c["n"],
              "effect_size": c["effect_size"], "model": m["model"]}
             for m in models if m["status"] == "fitted" for c in m["contrasts"]]
    return {"reference": reference_condition(study), "excluded": len(skip), "models": models, "table": table,
            "descriptives": {name: descriptives(rows, study) for name, rows in scores.items()}}


# -- manipulation checks ------------------------------------------------------------------------------------


def _values(rows: Rows, column: str) -> list[float]:
    return [x for x in (number(r.get(column)) for r in rows) if x is not None]


def _summary(values: list[float]) -> dict[str, Any]:
    if not values:
        return {"n": 0, "median": None, "mean": None, "p90": None}
    return {"n": len(values), "median": _round(float(np.median(values))), "mean": _round(float(np.mean(values))),
            "p90": _round(float(np.percentile(values, 90)))}


def latency(messages: Rows, study: Mapping[str, Any]) -> dict[str, Any]:
    """Reply timing per condition from the pacing columns of messages.csv (assistant rows); "not recorded"
    when the export has none. Parity is tested with Kruskal-Wallis on each participant's median time to the
    first visible token (the model's own first token when nothing was paced), so replies are not counted as
    independent."""
    replies = [r for r in messages if r.get("role") == "assistant"]
    present = [c for c in LATENCY_COLUMNS if any(number(r.get(c)) is not None for r in replies)]
    if not present:
        return {"recorded": False, "message": "not recorded: this export has no reply-timing columns "
                                              f"({', '.join(LATENCY_COLUMNS)})"}
    by_condition: dict[str, Any] = {}
    for group in conditions(study):
        rows = [r for r in replies if r.get("memory_group") == group]
        if rows:
            by_condition[group] = {"replies": len(rows),
                                   **{column: _summary(_values(rows, column)) for column in present}}
    tested = "visible_first_token_ms" if "visible_first_token_ms" in present else present[0]
    per_person: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for r in replies:
        value = number(r.get(tested))
        if value is not None and r.get("memory_group"):
            per_person[r["memory_group"]][r["participant_code"]].append(value)
    samples = {g: [float(np.median(v)) for v in people.values()] for g, people in per_person.items()}
    test: dict[str, Any] = {"test": "kruskal-wallis", "column": tested, "unit": "participant median"}
    usable = [s for s in samples.values() if s]
    if len(usable) < 2:
        test.update(p=None, code="one_condition", message="not tested: fewer than two conditions with replies")
    elif len({x for s in usable for x in s}) < 2:
        test.update(p=1.0, statistic=0.0, code="no_variation", message="every participant's median is the same")
    else:
        h, p = stats.kruskal(*usable)
        test.update(statistic=_round(float(h)), p=_round(float(p)))
    return {"recorded": True, "columns": present, "by_condition": by_condition, "parity": test}


def exposure(task_sessions: Rows, study: Mapping[str, Any]) -> dict[str, Any]:
    """``memory_exposure`` per condition and task from task_sessions.csv (means over the sessions that have
    replies), or "not recorded"."""
    present = [c for c in EXPOSURE_COLUMNS if any(number(r.get(c)) is not None for r in task_sessions)]
    if not present:
        return {"recorded": False, "message": "not recorded: this export has no memory-exposure columns "
                                              f"({', '.join(EXPOSURE_COLUMNS)})"}
    out: dict[str, Any] = {}
    for group in conditions(study):
        cells = {}
        for task in task_ids(study):
            rows = [r for r in task_sessions if r.get("memory_group") == group and r.get("task_id") == task
                    and (number(r.get("exposure_replies")) or 0) > 0]
            if rows:
                cells[task] = {"sessions": len(rows), **{
                    column: _round(float(np.mean(v))) if (v := _values(rows, column)) else None for column in present}}
        if cells:
            out[group] = cells
    return {"recorded": True, "columns": present, "by_condition": out}


def recall_events(events: Rows, task_sessions: Rows, study: Mapping[str, Any]) -> dict[str, Any]:
    """L4's recall events per condition and task: candidates scored, memories recalled, participants with at
    least one recall, and recalls per participant who had a session at that task."""
    sessions: dict[tuple[str, str], set[str]] = defaultdict(set)
    for r in task_sessions:
        sessions[(r.get("memory_group") or "", r.get("task_id") or "")].add(r["participant_code"])
    out: dict[str, Any] = {}
    for group in conditions(study):
        cells = {}
        for task in task_ids(study):
            rows = [r for r in events if r.get("memory_group") == group and r.get("task_id") == task]
            recalled = [r for r in rows if truthy(r.get("recalled"))]
            people = len(sessions[(group, task)])
            if rows or people:
                cells[task] = {"candidates": len(rows), "recalled": len(recalled),
                               "participants_with_recall": len({r["participant_code"] for r in recalled}),
                               "participants": people,
                               "recalled_per_participant": _round(len(recalled) / people) if people else None}
        if cells:
            out[group] = cells
    return {"by_condition": out}


def manipulation_check(answers: Rows, participants: Rows, study: Mapping[str, Any]) -> dict[str, Any]:
    """The self-reported manipulation check (``mc_1``) by condition and task, and a Kruskal-Wallis test across
    conditions on each participant's mean answer."""
    skip = excluded(participants, study)
    cells: dict[tuple[str, str], list[float]] = defaultdict(list)
    per_person: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for row in answers:
        value = number(row.get("value"))
        if row.get("item_id") != MC_ITEM or value is None or not row.get("memory_group") \
                or row["participant_code"] in skip:
            continue
        cells[(row["memory_group"], row["task_id"])].append(value)
        per_person[row["memory_group"]][row["participant_code"]].append(value)
    if not cells:
        return {"item": MC_ITEM, "recorded": False, "message": f"no answers to {MC_ITEM} in this export"}
    table = {g: {t: describe(cells[(g, t)]) for t in task_ids(study) if cells.get((g, t))}
             for g in conditions(study) if per_person.get(g)}
    samples = [[float(np.mean(v)) for v in per_person[g].values()] for g in table]
    test: dict[str, Any] = {"test": "kruskal-wallis", "unit": "participant mean"}
    if len(samples) < 2:
        test.update(p=None, code="one_condition", message="not tested: fewer than two conditions answered")
    elif len({x for s in samples for x in s}) < 2:
        test.update(p=1.0, statistic=0.0, code="no_variation", message="every participant answered the same")
    else:
        h, p = stats.kruskal(*samples)
        test.update(statistic=_round(float(h)), p=_round(float(p)))
    overall = {g: describe([float(np.mean(v)) for v in per_person[g].values()]) for g in table}
    return {"item": MC_ITEM, "recorded": True, "by_condition_task": table, "by_condition": overall, "test": test}
