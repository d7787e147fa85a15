"""POST /api/admin/report: the admin console's "Generate report" (admin only, CSRF), on a study that has just
begun: every scale says why it has no model yet, and nothing fails."""
from __future__ import annotations

import io
import json
import zipfile

import pytest
from sqlalchemy import select

from database.models import AuditLog
from tests.conftest import walk_task

pytestmark = pytest.mark.postgres


def test_admin_downloads_the_report_in_the_language_asked(admin_client, make_participant, clock, study, app):
    alice = make_participant("alice", language="zh")
    walk_task(alice, clock, "T1", ["我叫爱丽丝。", "我养了一只猫。"], study=study)
    response = admin_client.post("/api/admin/report", json={"language": "zh"})
    assert response.status_code == 200 and response.mimetype == "application/zip"
    assert response.headers["Content-Disposition"].endswith('-zh.zip"')
    files = zipfile.ZipFile(io.BytesIO(response.data))
    assert set(files.namelist()) == {"report.html", "report.json"}
    report = json.loads(files.read("report.json"))
    html = files.read("report.html").decode("utf-8")
    assert report["language"] == "zh" and "研究报告" in html and "<script" not in html
    group = next(g for g, c in report["consort"]["by_condition"].items() if c["assigned"])
    assert report["consort"]["by_condition"][group]["tasks"]["T1"]["completed"] == 1
    assert report["outcomes"] == []  # one participant: no model, and a message for each scale
    assert all(m["status"] == "not_fitted" and m["message"] for m in report["models"])
    assert "未拟合模型：" in html and "no scores" not in html and "nothing to compare" not in html  # reasons in zh
    runtime = app.extensions["memory_lab"]
    with runtime.db.session() as session:
        audit = session.scalar(select(AuditLog).where(AuditLog.action == "report_generated"))
        assert audit.details["channel"] == "api" and audit.details["participants"] == 1
    default = admin_client.post("/api/admin/report", json={})  # the admin's own language
    assert default.status_code == 200 and default.headers["Content-Disposition"].endswith('-zh.zip"')


def test_report_needs_admin_csrf_and_a_known_language(admin_client, make_participant, client):
    participant = make_participant("bob")
    assert participant.post("/api/admin/report", json={}).status_code == 403
    assert client.post("/api/admin/report", json={}).status_code in (400, 401)  # no session: CSRF or login
    no_token = admin_client.raw.post("/api/admin/report", json={})
    assert no_token.status_code == 400 and no_token.get_json()["error"] == "csrf_failed"
    bad = admin_client.post("/api/admin/report", json={"language": "fr"})
    assert bad.status_code == 400 and bad.get_json()["error"] == "invalid_language"
    assert admin_client.get("/api/admin/report").status_code == 405
    # a study with no answers at all: a report all the same, each part saying there is nothing yet
    empty = admin_client.post("/api/admin/report", json={"language": "en"})
    assert empty.status_code == 200
    report = json.loads(zipfile.ZipFile(io.BytesIO(empty.data)).read("report.json"))
    assert report["outcomes"] == [] and report["attrition"]["test"] is None
    assert report["manipulation"]["mc"]["recorded"] is False
