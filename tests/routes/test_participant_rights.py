"""Participant rights from the participant's side (issue 18 items 10-12): withdraw, withdraw and erase,
a copy of the consent with the lab's contact, and the debrief."""
from __future__ import annotations

import hashlib
import json
from types import SimpleNamespace

import pytest
from sqlalchemy import func, select

from database.models import AuditLog, Message, User
from tests.conftest import walk_task

pytestmark = pytest.mark.postgres

LINES = ["你好，我叫林晓，是一名博士生。", "我养了一只叫团子的猫。"]


def _user(app, username: str) -> SimpleNamespace | None:
    with app.extensions["memory_lab"].db.Session() as session:
        user = session.scalar(select(User).where(User.username == username))
        if user is None:
            return None
        return SimpleNamespace(id=user.id, status=user.status, withdrawn_by=user.withdrawn_by,
                               memory_group=user.memory_group, participant_code=user.participant_code)


def _monitor_row(admin_client, user_id: int) -> dict:
    rows = admin_client.get("/api/admin/participants").get_json()["participants"]
    return next(r for r in rows if r["id"] == user_id)


# -- 10. withdrawal ------------------------------------------------------------------------------------


def test_withdrawal_needs_confirmation_then_keeps_data_and_says_withdrawn(app, make_participant, admin_client,
                                                                       clock, study):
    api = make_participant("leaver")
    assert api.post("/api/tasks/T1/start").status_code == 201
    clock.advance(30)
    assert api.post("/api/tasks/T1/messages", json={"content": LINES[0]}).status_code == 201

    refused = api.post("/api/me/withdraw", json={"erase": False})
    assert refused.status_code == 400 and refused.get_json()["error"] == "confirmation_required"
    assert _user(app, "leaver").status == "active"

    clock.advance(60)
    response = api.post("/api/me/withdraw", json={"confirm": True, "erase": False})
    assert response.status_code == 200, response.get_json()
    body = response.get_json()
    assert body["erased"] is False and body["withdrawn_at"] == clock.now().isoformat() + "Z"
    assert body["debrief"]["title"]  # the debrief is shown after withdrawal

    user = _user(app, "leaver")
    assert (user.status, user.withdrawn_by) == ("withdrawn", "participant")
    with app.extensions["memory_lab"].db.Session() as session:
        assert session.scalar(select(func.count(Message.id)).where(Message.user_id == user.id)) == 2  # data kept
        audit = session.scalars(select(AuditLog).where(AuditLog.action == "participant_withdrawn")).all()
        assert [(a.actor_user_id, a.target_user_id, a.details["by"]) for a in audit] == \
            [(user.id, user.id, "participant")]

    # a true message everywhere the participant could look, not "cannot be started yet"
    assert api.get("/api/tasks").get_json()["participant_status"] == "withdrawn"
    assert api.get("/api/tasks/T2").get_json()["task"]["participant_status"] == "withdrawn"
    start = api.post("/api/tasks/T2/start")
    assert start.status_code == 403 and start.get_json()["error"] == "withdrawn"
    again = api.post("/api/me/withdraw", json={"confirm": True, "erase": False})
    assert again.status_code == 409 and again.get_json()["error"] == "already_withdrawn"

    row = _monitor_row(admin_client, user.id)
    assert (row["status"], row["withdrawn_by"], row["withdrawn_at"]) == \
        ("withdrawn", "participant", body["withdrawn_at"])


def test_admin_withdrawal_is_told_apart_from_the_participants_own(app, make_participant, admin_client):
    make_participant("ward")
    user = _user(app, "ward")
    assert admin_client.post(f"/api/admin/participants/{user.id}/withdraw", json={"reason": "asked by phone"}
                             ).status_code == 200
    assert _monitor_row(admin_client, user.id)["withdrawn_by"] == "admin"


def test_withdraw_and_erase_goes_through_the_erasure_service_and_ends_the_session(app, make_participant,
                                                                                admin_client, clock, study):
    api = make_participant("eraseme")
    walk_task(api, clock, "T1", LINES, study=study)
    user = _user(app, "eraseme")
    response = api.post("/api/me/withdraw", json={"confirm": True, "erase": True})
    assert response.status_code == 200, response.get_json()
    body = response.get_json()
    assert body["erased"] is True
    assert body["debrief"]["your_assistant"] == study.debrief.by_condition[user.memory_group]["zh"]

    assert api.get("/api/auth/me").status_code == 401  # the session has ended
    erased = _user(app, "erased-" + user.participant_code)
    assert erased.id == user.id and erased.status == "erased" and erased.withdrawn_by == "participant"
    with app.extensions["memory_lab"].db.Session() as session:
        assert session.scalar(select(func.count(Message.id)).where(Message.user_id == user.id)) == 0
        erasure = session.scalar(select(AuditLog).where(AuditLog.action == "participant_erased"))
        assert (erasure.actor_user_id, erasure.target_user_id) == (user.id, user.id)
        assert "own request" in erasure.details["reason"]
    row = _monitor_row(admin_client, user.id)
    assert (row["status"], row["withdrawn_by"]) == ("erased", "participant") and row["erased_at"]


def test_erasure_is_refused_when_the_consent_does_not_offer_it(app, make_participant):
    runtime = app.extensions["memory_lab"]
    runtime.settings.study = runtime.study.with_overrides({"consent": {"erasure_on_withdrawal": False}})
    api = make_participant("keeper")
    assert api.get("/api/study").get_json()["consent"]["erasure_on_withdrawal"] is False
    response = api.post("/api/me/withdraw", json={"confirm": True, "erase": True})
    assert response.status_code == 403 and response.get_json()["error"] == "erasure_not_offered"
    assert _user(app, "keeper").status == "active"  # nothing happened


def test_a_withdrawn_participant_may_still_ask_for_erasure(app, make_participant):
    api = make_participant("twostep")
    assert api.post("/api/me/withdraw", json={"confirm": True}).status_code == 200
    assert api.post("/api/me/withdraw", json={"confirm": True, "erase": True}).status_code == 200
    assert _user(app, "twostep") is None  # the account is the tombstone now


def test_withdrawal_needs_a_participant_login(client):
    assert client.post("/api/me/withdraw", json={"confirm": True}).status_code == 401


# -- 11. contact and a copy of the consent ------------------------------------------------------------


def test_study_facts_carry_the_labs_contact_in_each_language(client, study):
    consent = client.get("/api/study").get_json()["consent"]
    assert consent["contact"] == dict(study.consent.contact)
    assert "@" in consent["contact"]["zh"] and "@" in consent["contact"]["en"]


def test_the_consent_copy_shows_the_wording_accepted_with_its_date_even_after_the_study_file_changes(
        app, make_participant, clock, study):
    accepted_at = clock.now()
    api = make_participant("copyme", language="en")
    clock.advance(3 * 86400)
    runtime = app.extensions["memory_lab"]
    # the lab edits the consent later and forgets to change the version
    runtime.settings.study = runtime.study.with_overrides({"consent": {"text": {"zh": "新文本", "en": "New text"}}})

    copy = api.get("/api/me/consent").get_json()["consent"]
    wording = {"version": study.consent.version, "text": dict(study.consent.text),
               "contact": dict(study.consent.contact)}
    digest = hashlib.sha256(json.dumps(wording, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
                            .encode()).hexdigest()
    assert copy == {"version": study.consent.version, "text_hash": digest, "exact": True, "language": "en",
                    "accepted_at": accepted_at.isoformat() + "Z", "participant_code": copy["participant_code"],
                    "study_name": study.name, "text": study.consent.text["en"],
                    "contact": study.consent.contact["en"]}
    assert api.get("/api/me/consent?lang=zh").get_json()["consent"]["text"] == study.consent.text["zh"]

    page = api.get("/consent/copy")
    assert page.status_code == 200 and page.mimetype == "text/html"
    html = page.get_data(as_text=True)
    assert study.consent.text["en"] in html and "New text" not in html
    assert accepted_at.date().isoformat() in html and study.consent.contact["en"] in html
    assert 'id="print-copy"' in html and "<script>" not in html  # printed by a module, no inline script
    download = api.get("/consent/copy?download=1")
    assert download.headers["Content-Disposition"].startswith("attachment;")
    assert download.get_data(as_text=True) == html


def test_the_consent_copy_is_only_the_logged_in_participants(client):
    assert client.get("/api/me/consent").status_code == 401
    response = client.get("/consent/copy")
    assert response.status_code == 302 and "/?next=" in response.headers["Location"]


def test_the_consent_copy_escapes_what_the_study_file_says(app, make_participant):
    runtime = app.extensions["memory_lab"]
    runtime.settings.study = runtime.study.with_overrides(
        {"consent": {"contact": {"zh": "<script>alert(1)</script>", "en": "<b>x</b>"}}})
    api = make_participant("escaped")
    html = api.get("/consent/copy").get_data(as_text=True)
    assert "<script>alert(1)</script>" not in html and "&lt;script&gt;" in html


# -- 12. debrief --------------------------------------------------------------------------------------


def _participant_json(api) -> str:
    """Everything a participant's page can fetch before the debrief, as one text."""
    texts = [api.get(path).get_data(as_text=True) for path in
             ("/api/study", "/api/auth/me", "/api/tasks", "/api/me/consent", "/api/me/return-link")]
    for task_id in ("T1", "T2", "T3", "T4"):
        texts.append(api.get(f"/api/tasks/{task_id}").get_data(as_text=True))
    return "\n".join(texts)


def test_the_debrief_waits_for_the_last_task_and_never_leaks_the_condition_before(app, make_participant, clock,
                                                                                study):
    api = make_participant("finisher")
    user = _user(app, "finisher")
    group_text = study.debrief.by_condition[user.memory_group]
    walk_task(api, clock, "T1", LINES, study=study)
    for task_id in ("T2", "T3", "T4"):
        refused = api.get("/api/me/debrief")
        assert refused.status_code == 403 and refused.get_json()["error"] == "debrief_not_yet"
        seen = _participant_json(api) + api.get(f"/api/tasks/{task_id}/questionnaire").get_data(as_text=True)
        assert group_text["zh"] not in seen and group_text["en"] not in seen
        assert f'"{user.memory_group}"' not in seen and study.debrief.text["zh"] not in seen
        _unlock(api, clock, task_id)
        walk_task(api, clock, task_id, LINES, study=study)

    debrief = api.get("/api/me/debrief")
    assert debrief.status_code == 200
    assert debrief.get_json()["debrief"] == {
        "title": study.debrief.title["zh"], "text": study.debrief.text["zh"], "your_assistant": group_text["zh"],
        "contact": study.consent.contact["zh"]}
    clock.advance(30 * 86400)
    assert api.get("/api/me/debrief").status_code == 200  # it stays reachable afterwards


def _unlock(api, clock, task_id: str) -> None:
    """Move the clock to the task's unlock time."""
    from datetime import datetime

    task = next(t for t in api.get("/api/tasks").get_json()["tasks"] if t["id"] == task_id)
    unlock = datetime.fromisoformat(task["available_at"].removesuffix("Z"))
    if unlock > clock.now():
        clock.set(unlock)


def test_the_debrief_is_shown_after_withdrawal(make_participant, study):
    api = make_participant("early")
    assert api.get("/api/me/debrief").status_code == 403
    assert api.post("/api/me/withdraw", json={"confirm": True}).status_code == 200
    assert api.get("/api/me/debrief").get_json()["debrief"]["text"] == study.debrief.text["zh"]


def test_the_default_debrief_explains_why_the_no_memory_assistant_remembered_nothing(study):
    assert "不记得" in study.debrief.text["zh"] and "did not remember" in study.debrief.text["en"]
    assert "不记得" in study.debrief.by_condition["L1"]["zh"]
    assert set(study.enabled_conditions) <= set(study.debrief.by_condition)


def test_the_export_says_who_withdrew_each_participant_and_when(app, make_participant, admin_client, clock):
    """participants.csv tells the participant's own withdrawal (with or without erasure) from an admin's."""
    import csv
    import io
    import zipfile

    from services.reporting.export_service import ExportOptions, export_runtime

    own, erasing = make_participant("leaves"), make_participant("leaveserased")
    make_participant("ledout")
    assert own.post("/api/me/withdraw", json={"confirm": True, "erase": False}).status_code == 200
    clock.advance(60)
    assert erasing.post("/api/me/withdraw", json={"confirm": True, "erase": True}).status_code == 200
    clock.advance(60)
    assert admin_client.post(f"/api/admin/participants/{_user(app, 'ledout').id}/withdraw",
                             json={"reason": "asked by phone"}).status_code == 200
    archive = zipfile.ZipFile(io.BytesIO(export_runtime(app.extensions["memory_lab"], options=ExportOptions()).data))
    name = next(n for n in archive.namelist() if n.endswith("participants.csv"))
    rows = list(csv.DictReader(io.StringIO(archive.read(name).decode("utf-8"))))
    by = {(r["status"], r["withdrawn_by"], r["withdrawn_at"][:19], bool(r["erased_at"])) for r in rows
          if r["status"] != "active"}
    assert by == {("withdrawn", "participant", "2026-03-02 09:00:00", False),
                  ("erased", "participant", "2026-03-02 09:01:00", True),
                  ("withdrawn", "admin", "2026-03-02 09:02:00", False)}, by
    codebook = list(csv.DictReader(io.StringIO(archive.read(
        next(n for n in archive.namelist() if n.endswith("codebook.csv"))).decode("utf-8"))))
    described = {r["column"]: r["description"] for r in codebook if r["file"] == "participants.csv"}
    assert "participant" in described["withdrawn_by"] and "admin" in described["withdrawn_by"]
    assert "admin recorded" not in described["withdrawn_at"]  # no longer only an admin's
