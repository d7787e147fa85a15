"""The analysis on constructed export rows: where no model can be fitted it says why (never an exception), the
attrition test chooses chi-square or Fisher by the expected counts, and the report's study keys are validated."""
from __future__ import annotations

import numpy as np
import pytest

from services.reporting import analysis, report_html
from services.study.definition import StudyDefinitionError, load_study


@pytest.fixture(scope="module")
def study_config():
    return load_study().as_dict()


def _answers(people: dict[str, str], tasks: list[str], value, item: str = "close_1") -> list[dict[str, str]]:
    """One answer per participant and task; ``value(code, group, task)`` gives it."""
    return [{"participant_code": code, "memory_group": group, "task_id": task, "item_id": item,
             "instrument": "closeness", "value": str(value(code, group, task))}
            for code, group in people.items() for task in tasks]


def _people(counts: dict[str, int]) -> dict[str, str]:
    return {f"{group}-{n}": group for group, k in counts.items() for n in range(k)}


def _model(answers, study_config, scale="closeness"):
    result = analysis.outcomes(answers, [], study_config)
    return next(m for m in result["models"] if m["scale"] == scale), result


def test_one_condition_is_not_fitted_and_says_so(study_config):
    answers = _answers(_people({"L1": 10}), ["T1", "T2"], lambda c, g, t: 3 + len(c) % 3)
    model, result = _model(answers, study_config)
    assert model["status"] == "not_fitted" and model["message"] == "one condition only (L1): nothing to compare"
    assert result["table"] == []


def test_too_few_participants_and_a_missing_reference_are_named(study_config):
    answers = _answers(_people({"L1": 10, "L4": 2}), ["T1", "T2"], lambda c, g, t: 3 + len(c) % 3)
    model, _ = _model(answers, study_config)
    assert model["status"] == "not_fitted"
    assert model["message"] == "too few participants: L4 n=2 (at least 3 per condition)"
    assert report_html.reason(model, "zh") == "参与者太少：L4 n=2（每组至少 3 人）"
    assert report_html.reason(model, "en") == model["message"]
    answers = _answers(_people({"L2": 5, "L4": 5}), ["T1"], lambda c, g, t: 4)
    model, _ = _model(answers, study_config)
    assert model["message"] == "no scores in the reference condition L1"


def test_an_empty_condition_by_task_cell_is_named(study_config):
    people = _people({"L1": 6, "L4": 6})
    answers = [a for a in _answers(people, ["T1", "T2"], lambda c, g, t: 3 + len(c) % 4)
               if not (a["memory_group"] == "L4" and a["task_id"] == "T2")]
    model, _ = _model(answers, study_config)
    assert model["status"] == "not_fitted" and model["message"] == "empty condition x task cell(s): L4 x T2"


def test_constant_answers_give_a_message_or_a_singular_note_never_an_exception(study_config):
    answers = _answers(_people({"L1": 6, "L4": 6}), ["T1", "T2"], lambda c, g, t: 4)
    model, _ = _model(answers, study_config)
    assert model["status"] == "not_fitted" and "could not be fitted" in model["message"]


def test_no_person_effect_is_a_singular_fit_with_a_note(study_config):
    """Answers with noise but no participant effect: the random-intercept variance is 0 (lme4's "boundary
    (singular) fit"); the contrast is still estimated and the note says so."""
    rng = np.random.default_rng(3)
    noise = {}

    def value(code, group, task):
        noise[(code, task)] = float(rng.normal(0, 1)) + (1.0 if group == "L4" else 0.0)
        return f"{4 + noise[(code, task)]:.6f}"

    answers = _answers(_people({"L1": 12, "L4": 12}), ["T1", "T2", "T3"], value)
    model, result = _model(answers, study_config)
    assert model["status"] == "fitted"  # with this seed the estimated variance is at the boundary
    assert model["random_intercept_variance"] <= analysis.SINGULAR_SHARE * model["residual_variance"]
    assert model["notes"] == ["singular fit: the random-intercept variance is estimated at 0 (estimates equal those "
                              "of a model without it)"]
    # with a random-intercept variance of 0 the contrast is the difference of cell means averaged over tasks
    means = {g: np.mean([noise[(c, t)] for (c, t) in noise if c.startswith(g)]) for g in ("L1", "L4")}
    row = result["table"][0]
    assert row["estimate"] == pytest.approx(means["L4"] - means["L1"], abs=1e-5)
    assert row["ci_low"] < row["estimate"] < row["ci_high"]


def test_contrast_by_hand_on_balanced_data(study_config):
    """Balanced cells: the mixed model's contrast equals the difference of the cell means averaged over tasks."""
    rng = np.random.default_rng(5)
    person = {}

    def value(code, group, task):
        base = person.setdefault(code, float(rng.normal(0, 0.7)))
        shift = {"L1": 0.0, "L2": 0.5, "L4": 1.0}[group] + {"T1": 0.0, "T2": 0.3}[task]
        return f"{4 + base + shift + float(rng.normal(0, 0.5)):.6f}"

    answers = _answers(_people({"L1": 8, "L2": 8, "L4": 8}), ["T1", "T2"], value)
    model, result = _model(answers, study_config)
    cells = {}
    for a in answers:
        cells.setdefault((a["memory_group"], a["task_id"]), []).append(float(a["value"]))
    by_hand = np.mean([np.mean(cells[("L4", t)]) - np.mean(cells[("L1", t)]) for t in ("T1", "T2")])
    row = next(r for r in result["table"] if r["contrast"] == "L4-L1")
    assert row["estimate"] == pytest.approx(by_hand, abs=1e-6)
    assert row["n"] == 16 and model["model"] == "mixed"
    assert [r["contrast"] for r in result["table"]] == ["L2-L1", "L4-L1"]


def _participants(table: dict[str, tuple[int, int]]) -> list[dict[str, str]]:
    rows = []
    for group, (done, not_done) in table.items():
        for n in range(done + not_done):
            rows.append({"participant_code": f"{group}-{n}", "memory_group": group,
                         "T4_completed_at": "2026-03-20 10:00:00" if n < done else ""})
    return rows


def test_attrition_uses_chi_square_for_large_counts_and_fisher_for_small(study_config):
    large = analysis.attrition(_participants({"L1": (50, 50), "L2": (70, 30)}), study_config)
    # chi-square without continuity correction on [[50, 50], [70, 30]]: 8.333, p = 0.00389
    assert large["test"] == "chi-square" and large["statistic"] == pytest.approx(25 / 3)
    assert large["p"] == pytest.approx(0.003892, abs=1e-6)
    small = analysis.attrition(_participants({"L1": (3, 0), "L2": (0, 3)}), study_config)
    # Fisher's exact test on [[3, 0], [0, 3]]: two-sided p = 2 / C(6, 3) = 0.1
    assert small["test"] == "fisher-exact" and small["p"] == pytest.approx(0.1)
    three = analysis.attrition(_participants({"L1": (4, 1), "L2": (5, 0), "L3": (1, 4)}), study_config)
    assert three["test"] == "fisher-freeman-halton" and 0.045 < three["p"] < 0.06  # exact: 0.0509
    # scipy draws the tables for more than two rows: the seed makes the report reproducible
    assert analysis.attrition(_participants({"L1": (4, 1), "L2": (5, 0), "L3": (1, 4)}), study_config) == three
    one = analysis.attrition(_participants({"L1": (4, 1)}), study_config)
    assert one["test"] is None and "fewer than two conditions" in one["message"]


def test_report_settings_are_validated():
    study = load_study()
    assert study.report.reference_condition == "L1" and study.report.exclude_flags == ("attention_failures",)
    assert study.with_overrides({"enabled_conditions": ["L3", "L4"]}).report.reference_condition == "L3"
    assert study.with_overrides({"report": {"reference_condition": "L4"}}).report.reference_condition == "L4"
    with pytest.raises(StudyDefinitionError, match="report.reference_condition is 'S1'; allowed: the enabled"):
        study.with_overrides({"report": {"reference_condition": "S1"}})
    with pytest.raises(StudyDefinitionError, match="report.exclude_flags"):
        study.with_overrides({"report": {"exclude_flags": ["typos"]}})
    with pytest.raises(StudyDefinitionError, match="unknown key report.reference"):
        study.with_overrides({"report": {"reference": "L1"}})
    assert study.with_overrides({"report": {"exclude_flags": []}}).report.exclude_flags == ()


def test_answers_from_a_condition_no_longer_enabled_stay_out_of_the_model(study_config):
    people = _people({"L1": 6, "L4": 6})
    answers = _answers(people, ["T1", "T2"], lambda c, g, t: 3 + len(c) % 4 + (1 if g == "L4" else 0))
    model, result = _model(answers, study_config)
    stray = _answers(_people({"S1": 6}), ["T1", "T2"], lambda c, g, t: 7)  # S1 is not enabled by default
    model_with, result_with = _model(answers + stray, study_config)
    assert result_with["table"] == result["table"] and model_with["n_observations"] == model["n_observations"]
