"""``flask --app app preflight`` (issue 17, item 4): offline, on a fresh database, it runs both checks and
stores its report and verdict in the study's database (the bots ran on a temporary one); with an embedder the
active recall preset was not fitted for it refuses, naming the tool that fits one."""
from __future__ import annotations

from dataclasses import replace

import pytest
from sqlalchemy import func, select

from app import create_app
from database.models import PreflightReport, User
from services.study import preflight_gate

# the pre-flight replays the calibration sample and walks bots and probe personas: untraced when the suite
# measures coverage (tests/conftest.py; docs/testing.md, "Coverage")
pytestmark = pytest.mark.untraced


L3_AND_L4 = {"enabled_conditions": ["L3", "L4"]}
OTHER_EMBEDDER = {"memory": {"recall": {"overrides": {"relevance": {"embedder_model": "text-embedding-v3"}}}}}


def _reports(app) -> list[PreflightReport]:
    with app.extensions["memory_lab"].db.Session() as session:
        return list(session.scalars(select(PreflightReport).order_by(PreflightReport.id)))


def _close(app) -> None:
    runtime = app.extensions["memory_lab"]
    runtime.background.shutdown()
    runtime.db.dispose()


@pytest.mark.slow
@pytest.mark.timeout(1800)  # (a) replays every held-out and blind calibration participant; (b) walks 4 bots
def test_preflight_runs_offline_on_a_fresh_database_and_stores_its_verdict(settings, database, clock,
                                                                          calibration_embedder):
    # A study enabling L3 and L4 only (the smallest that holds a declared check, L4 beyond L3): one bot per
    # condition and language. The offline embedder answers from tests/fixtures/embeddings.npz (tests/embedding_cache).
    settings = replace(settings, study=settings.study.with_overrides(L3_AND_L4))
    app = create_app(settings, clock=clock, embedder=calibration_embedder)
    try:
        # half-second pilot days: T4 opens 8 s after T1 rather than 16 s; (a) and (b) gave the same verdicts and
        # figures as at 1-second days (docs/benchmarks.md, "Test suite time, session 14"), and a check's verdict is
        # not what this test pins
        result = app.test_cli_runner().invoke(args=["preflight", "--day-seconds", "0.5"])
        [report] = _reports(app)
        # exit 0 exactly when both checks passed; a failed check exits 1 and says which
        assert result.exit_code == (0 if report.passed else 1), result.output
        assert ("pre-flight PASSED" if report.passed else "pre-flight FAILED") in result.output
        assert report.study_hash == preflight_gate.study_hash(settings.study)
        assert report.embedder_model == app.extensions["memory_lab"].embedder.model
        assert report.chat_model == "offline/offline-template-responder"
        calibration, manipulation = report.checks["calibration"], report.checks["manipulation"]
        assert calibration["verdict"] in ("passed", "failed")
        assert calibration["preset"] == settings.study.memory.recall.preset
        assert set(calibration["figures"]) == {"zh", "en"}
        # issue 27's rule: twelve pooled targets and two shapes, each printed with figure, interval, n and verdict
        assert len(calibration["targets"]) == 12 and len(calibration["shape"]) == 2
        assert calibration["passed"] == (all(t["verdict"] in ("met", "within_error") for t in calibration["targets"])
                                         and all(d["above"] for d in calibration["shape"]))
        assert "(a) recall calibration: " in result.output and "(b) bot manipulation check: " in result.output
        assert "zh T2 relevant recalled: " in result.output and "95% one-sided" in result.output
        assert manipulation["verdict"] in ("passed", "failed")
        assert {lang: r["bots"] for lang, r in manipulation["by_language"].items()} == {
            "zh": len(settings.study.enabled_conditions), "en": len(settings.study.enabled_conditions)}
        probes = report.checks["probe"]  # (c): the held-out and blind probe personas in L4
        assert probes["verdict"] in ("passed", "failed") and probes["lines"] and len(probes["targets"]) == 8
        assert "(c) probe recall check" in result.output
        assert report.passed == (calibration["passed"] and manipulation["passed"] and probes["passed"])
        for name in manipulation["failed_checks"]:
            assert f"FAILED: {name}" in result.output
        with app.extensions["memory_lab"].db.Session() as session:
            assert session.scalar(select(func.count(User.id))) == 0  # the bots never touched the study's database
            status = preflight_gate.preflight_status(session, settings, report.embedder_model)
        assert status["state"] == ("verified" if report.passed else "failed")
        assert status["report"]["id"] == report.id
    finally:
        _close(app)


def test_preflight_refuses_an_embedder_the_preset_was_not_fitted_for(settings, database, clock):
    mismatched = replace(settings, study=settings.study.with_overrides(OTHER_EMBEDDER))
    app = create_app(mismatched, clock=clock)
    try:
        result = app.test_cli_runner().invoke(args=["preflight"])
        assert result.exit_code != 0
        assert "calibrate_recall.py --fit --write-preset" in result.output
        [report] = _reports(app)
        assert not report.passed
        assert report.checks["calibration"]["verdict"] == "refused"
        assert "calibrate_recall.py --fit --write-preset" in report.checks["calibration"]["message"]
        assert report.checks["manipulation"]["verdict"] == "not_run"
        assert report.checks["probe"]["verdict"] == "not_run"  # L4 on another embedder's preset means nothing
        with app.extensions["memory_lab"].db.Session() as session:
            assert preflight_gate.preflight_status(session, mismatched, report.embedder_model)["state"] == "failed"
    finally:
        _close(app)
