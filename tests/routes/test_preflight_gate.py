"""The pre-flight's report in use (issue 17, item 4): the REQUIRE_PREFLIGHT gate on registration and panel
entry, the admin console's state (verified / failed / changed / not verified), the start-up embedder
warning, and the export manifest."""
from __future__ import annotations

import io
import json
import logging
import zipfile
from dataclasses import replace

import pytest

from database.models import PreflightReport
from services.reporting.export_service import ExportOptions, build_export
from services.research import preflight

OTHER_EMBEDDER = {"memory": {"recall": {"overrides": {"relevance": {"embedder_model": "text-embedding-v3"}}}}}


def _runtime(app):
    return app.extensions["memory_lab"]


def _store(app, clock, *, passed: bool, study=None) -> int:
    runtime = _runtime(app)
    with runtime.db.session() as session:
        report = PreflightReport(
            created_at=clock.now(), study_hash=preflight.study_hash(study or runtime.study), passed=passed,
            embedder_model=runtime.embedder.model, chat_model="offline/offline-template-responder",
            providers={"reply": ["offline/offline-template-responder"], "embedder": runtime.embedder.model},
            checks={"calibration": {"verdict": "passed", "passed": True},
                    "manipulation": {"verdict": "passed" if passed else "failed", "passed": passed,
                                     "failed_checks": [] if passed else ["L4's context holds a planted specific"]}},
            duration_seconds=1.0)
        session.add(report)
        session.flush()
        return report.id


def _require(app, **changes):
    runtime = _runtime(app)
    runtime.settings = replace(runtime.settings, require_preflight=True, **changes)


def _register(client, name):
    return client.register(name, language="en")


def _panel(client, external_id):
    return client.post("/api/auth/panel", json={"external_id": external_id, "consent": True, "language": "en"})


@pytest.mark.postgres
def test_registration_and_panel_entry_wait_for_a_passing_preflight(app, client, clock, study):
    _require(app)
    response = _register(client, "early_bird")
    assert response.status_code == 503
    assert response.get_json()["error"] == "study_not_open"
    assert "the study is not open yet" in response.get_json()["message"]
    assert _panel(client, "PANEL0001").status_code == 503

    _store(app, clock, passed=False)
    assert _register(client, "early_bird").status_code == 503  # a failed pre-flight does not open it

    clock.advance(60)
    _store(app, clock, passed=True)
    assert _register(client, "early_bird").status_code == 201
    assert _panel(client.__class__(app.test_client()), "PANEL0001").status_code == 201

    # the study definition changes: the passing report was for another one, so the study closes again
    runtime = _runtime(app)
    runtime.settings = replace(runtime.settings, study=study.with_overrides({"limits": {"max_message_chars": 3000}}))
    closed = _register(client.__class__(app.test_client()), "late_bird")
    assert closed.status_code == 503 and closed.get_json()["error"] == "study_not_open"


def test_without_require_preflight_registration_is_open(app, client):
    assert not _runtime(app).settings.require_preflight
    assert _register(client, "anyone").status_code == 201


def test_study_hash_is_stable_and_follows_the_definition(study):
    assert preflight.study_hash(study) == preflight.study_hash(study.with_overrides({}))
    assert len(preflight.study_hash(study)) == 64
    assert preflight.study_hash(study) != preflight.study_hash(
        study.with_overrides({"limits": {"max_message_chars": 3000}}))


@pytest.mark.postgres
def test_admin_console_state_follows_the_reports(app, admin_client, clock, study):
    def state():
        return admin_client.get("/api/admin/preflight").get_json()["preflight"]

    assert state()["state"] == "not_verified" and state()["report"] is None
    _store(app, clock, passed=False)
    assert state()["state"] == "failed"
    clock.advance(60)
    report_id = _store(app, clock, passed=True)
    verified = state()
    assert verified["state"] == "verified" and verified["report"]["id"] == report_id
    assert verified["report"]["embedder_model"] == _runtime(app).embedder.model
    assert verified["study_hash"] == preflight.study_hash(study)
    assert verified["embedder_warning"] is None
    runtime = _runtime(app)
    runtime.settings = replace(runtime.settings, study=study.with_overrides({"limits": {"max_message_chars": 3000}}))
    stale = state()
    assert stale["state"] == "changed" and stale["report"]["id"] == report_id  # stale: shown with its date


def test_a_configured_embedder_the_preset_was_not_fitted_for_is_logged_at_start_and_shown(
        settings, clock, database, caplog):
    from app import create_app
    from services.hosting.serving import warm_up
    from tests.conftest import ADMIN_PASSWORD, ApiClient

    mismatched = replace(settings, study=settings.study.with_overrides(OTHER_EMBEDDER))
    app = create_app(mismatched, clock=clock)
    with caplog.at_level(logging.WARNING, logger="services.hosting.serving"):
        warm_up(app.extensions["memory_lab"])  # what make run and make serve do before serving
    warnings = [r.getMessage() for r in caplog.records if r.name == "services.hosting.serving"]
    assert any("fitted for text-embedding-v3" in w and "calibrate_recall.py --fit --write-preset" in w
               for w in warnings)
    from services.participants.account_service import create_admin

    runtime = _runtime(app)
    with runtime.db.Session() as session:
        create_admin(session, "labadmin", ADMIN_PASSWORD, runtime.clock)
    admin = ApiClient(app.test_client())
    assert admin.login("labadmin", ADMIN_PASSWORD).status_code == 200
    shown = admin.get("/api/admin/preflight").get_json()["preflight"]
    assert "fitted for text-embedding-v3" in shown["embedder_warning"]
    assert shown["embedder_model"] == runtime.embedder.model
    runtime.background.shutdown()
    runtime.db.dispose()


@pytest.mark.postgres
@pytest.mark.parametrize("passed", [True, False])
def test_the_export_manifest_carries_the_latest_report(app, clock, passed):
    report_id = _store(app, clock, passed=passed)
    runtime = _runtime(app)
    with runtime.db.Session() as session:
        result = build_export(session, runtime.study, options=ExportOptions(), generated_at=clock.now())
    manifest = json.loads(zipfile.ZipFile(io.BytesIO(result.data)).read("manifest.json"))
    entry = manifest["preflight"]
    assert entry["state"] == ("verified" if passed else "failed")
    assert entry["report"]["id"] == report_id and entry["report"]["passed"] is passed
    assert entry["study_hash"] == preflight.study_hash(runtime.study)
    assert entry["report"]["checks"]["manipulation"]["verdict"] == ("passed" if passed else "failed")
