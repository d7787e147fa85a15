"""Previews, demo links and test participants (issue 29 §2)."""
from __future__ import annotations

import io
import zipfile
from datetime import timedelta

import pytest
from sqlalchemy import func, select

from database.models import Assignment, AuditLog, Message, ProfileVersion, User
from tests.conftest import ApiClient

pytestmark = pytest.mark.postgres


def _open(app, url: str) -> ApiClient:
    api = ApiClient(app.test_client())
    path = url.split("localhost", 1)[-1]
    response = api.raw.get(path)
    assert response.status_code == 302, response.get_data(as_text=True)[:200]
    return api


def _walk_chat(api, clock, study, task_id: str, texts: list[str]) -> None:
    assert api.post(f"/api/tasks/{task_id}/start").status_code == 201
    for text in texts:
        clock.advance(20)
        assert api.post(f"/api/tasks/{task_id}/messages", json={"content": text}).status_code == 201
    while api.post(f"/api/tasks/{task_id}/finish").status_code != 200:
        clock.advance(study.timing.idle_gap_seconds - 1)


def test_an_l4_preview_at_t2_opens_at_once_remembers_and_counts_nowhere(app, admin_client, make_participant,
                                                                        clock, study):
    make_participant()
    before = admin_client.get("/api/admin/participants").get_json()["summary"]["groups"]
    response = admin_client.post("/api/admin/preview", json={"condition": "L4", "task": "T1", "language": "en"})
    assert response.status_code == 200, response.get_json()
    body = response.get_json()
    assert "/preview/" in body["url"] and body["url"].endswith("?task=T1")
    viewer = _open(app, body["url"])
    me = viewer.get("/api/auth/me").get_json()["user"]
    assert me["role"] == "preview"
    tasks = viewer.get("/api/tasks").get_json()["tasks"]
    assert all(t["status"] == "available" for t in tasks)  # no unlock wait, no order
    _walk_chat(viewer, clock, study, "T1", ["My sister Lena is getting married in Porto next month.",
                                            "I am allergic to shellfish, so the wedding dinner worries me."])
    items = viewer.get("/api/tasks/T1/questionnaire").get_json()["items"]
    from tests.conftest import answer_for

    assert viewer.post("/api/tasks/T1/questionnaire",
                       json={"answers": {i["id"]: answer_for(i) for i in items}}).status_code == 201
    # T2 is open at once, and its reply is built from what L4 remembers of T1
    assert viewer.post("/api/tasks/T2/start").status_code == 201
    clock.advance(20)
    reply = viewer.post("/api/tasks/T2/messages", json={"content": "What should I eat at my sister's wedding?"})
    assert reply.status_code == 201
    runtime = app.extensions["memory_lab"]
    with runtime.db.Session() as session:
        assert session.scalar(select(func.count(ProfileVersion.id)).where(ProfileVersion.user_id == me["id"])) >= 1
        last = session.scalars(select(Message).where(Message.user_id == me["id"], Message.role == "assistant")
                               .order_by(Message.id.desc())).first()
        assert last.memory_group == "L4"
        assert last.memory_context and last.memory_context.get("condition", "L4") == "L4"
        assert "Lena" in last.prompt[0]["content"] or "shellfish" in last.prompt[0]["content"]
    after = admin_client.get("/api/admin/participants").get_json()
    assert after["summary"]["groups"] == before
    assert me["id"] not in {r["id"] for r in after["participants"]}
    export = admin_client.get("/api/admin/export")
    with zipfile.ZipFile(io.BytesIO(export.data)) as archive:
        assert "preview-" not in archive.read("participants.csv").decode()
    # deleted by the button, with everything it wrote
    listed = admin_client.get("/api/admin/previews").get_json()["previews"]
    assert [p["id"] for p in listed] == [me["id"]] and listed[0]["condition"] == "L4"
    assert admin_client.post("/api/admin/previews/delete").get_json()["deleted"] == 1
    with runtime.db.Session() as session:
        assert session.get(User, me["id"]) is None
        assert session.scalar(select(func.count(Message.id)).where(Message.user_id == me["id"])) == 0
        assert session.scalar(select(AuditLog).where(AuditLog.action == "preview_created")).target_user_id is None
    assert viewer.get("/api/tasks").status_code == 401


def test_previews_expire_and_are_deleted_after_the_set_time(app, admin_client, clock):
    first = admin_client.post("/api/admin/preview", json={"condition": "L1", "task": "T1", "language": "zh"})
    clock.advance(days=1, seconds=60)
    assert _open_fails(app, first.get_json()["url"])
    admin_client.post("/api/admin/preview", json={"condition": "L2", "task": "T2", "language": "zh"})
    assert [p["condition"] for p in admin_client.get("/api/admin/previews").get_json()["previews"]] == ["L2"]


def _open_fails(app, url: str) -> bool:
    return app.test_client().get(url.split("localhost", 1)[-1]).status_code == 404


def test_preview_input_is_checked(admin_client, make_participant):
    for body in ({"condition": "L9", "task": "T1", "language": "en"},
                 {"condition": "L4", "task": "T9", "language": "en"},
                 {"condition": "L4", "task": "T1", "language": "fr"}):
        response = admin_client.post("/api/admin/preview", json=body)
        assert response.status_code == 400, body
    assert make_participant().post("/api/admin/preview", json={"condition": "L4", "task": "T1",
                                                               "language": "en"}).status_code == 403


def test_demo_links_open_fresh_previews_and_can_be_revoked_or_expire(app, admin_client, clock):
    response = admin_client.post("/api/admin/demo-links", json={"condition": "L3", "language": "en", "days": 2,
                                                                "label": "ethics board"})
    assert response.status_code == 201
    link = response.get_json()
    assert link["state"] == "live" and "/demo/" in link["url"]
    one, two = _open(app, link["url"]), _open(app, link["url"])
    ids = {one.get("/api/auth/me").get_json()["user"]["id"], two.get("/api/auth/me").get_json()["user"]["id"]}
    assert len(ids) == 2
    runtime = app.extensions["memory_lab"]
    with runtime.db.Session() as session:
        groups = {session.scalar(select(Assignment.memory_group).where(Assignment.user_id == i)) for i in ids}
    assert groups == {"L3"}
    listed = admin_client.get("/api/admin/demo-links").get_json()["demo_links"]
    assert listed[0]["opened"] == 2
    assert admin_client.post(f"/api/admin/demo-links/{link['id']}/revoke").get_json()["state"] == "revoked"
    assert _open_fails(app, link["url"])
    other = admin_client.post("/api/admin/demo-links", json={"condition": "L1", "language": "zh", "days": 1}
                              ).get_json()
    clock.advance(timedelta(days=1, seconds=1).total_seconds())
    assert _open_fails(app, other["url"])
    assert admin_client.post("/api/admin/demo-links", json={"condition": "L1", "language": "zh", "days": 0}
                             ).status_code == 400


def test_test_participants_are_forced_counted_apart_and_exported_only_when_asked(app, admin_client,
                                                                                  make_participant):
    make_participant()
    response = admin_client.post("/api/admin/test-participants", json={"condition": "L2", "language": "zh"})
    assert response.status_code == 201
    pilot = response.get_json()
    api = ApiClient(app.test_client())
    assert api.raw.get(pilot["url"].split("localhost", 1)[-1]).status_code == 302
    assert api.get("/api/auth/me").get_json()["user"]["role"] == "test"
    assert api.post("/api/tasks/T1/start").status_code == 201
    monitor = admin_client.get("/api/admin/participants").get_json()
    assert monitor["test_participants"] == {"L2": 1}
    assert sum(monitor["summary"]["groups"].values()) == 1
    plain = admin_client.get("/api/admin/export")
    with zipfile.ZipFile(io.BytesIO(plain.data)) as archive:
        assert pilot["participant_code"] not in archive.read("participants.csv").decode()
    full = admin_client.get("/api/admin/export?include_test=1")
    with zipfile.ZipFile(io.BytesIO(full.data)) as archive:
        rows = archive.read("participants.csv").decode().splitlines()
    header = rows[0].split(",")
    pilot_row = next(r.split(",") for r in rows if pilot["participant_code"] in r)
    assert pilot_row[header.index("test_participant")] == "1"
    assert pilot_row[header.index("study_version")] == "1"
