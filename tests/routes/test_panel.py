"""Panel entry, completion codes, personal return links, the calendar file, data-quality fields, payments."""
from __future__ import annotations

import csv
import io
from datetime import timedelta

import pytest
from sqlalchemy import select

from database.models import Message, ReturnLink, User
from tests.conftest import ApiClient, walk_task

PROLIFIC_ID = "5f1a2b3c4d5e6f7a8b9c0d1e"


@pytest.fixture
def settings(settings):
    settings.study = settings.study.with_overrides({
        "panel": {"id_parameter": "PROLIFIC_PID", "tasks": {
            task_id: {"completion_code": f"C{task_id[1]}WAVE{task_id[1]}",
                      "redirect_url": "https://app.prolific.com/submissions/complete?cc={completion_code}"}
            for task_id in ("T1", "T2", "T3", "T4")}},
        "payments": {"currency": "GBP", "per_task": {"T1": 1.5, "T2": 2.0, "T3": 2.0, "T4": 2.5},
                     "completion_bonus": 3.0},
        "registration": {"password": True},  # password accounts beside the panel's (issue 28 item 1)
    })
    return settings


def _panel(app, external_id: str = PROLIFIC_ID, **extra) -> tuple[ApiClient, object]:
    api = ApiClient(app.test_client())
    response = api.post("/api/auth/panel", json={"external_id": external_id, "consent": True, **extra})
    return api, response


def test_panel_entry_creates_one_account_and_finds_it_again(app):
    api, first = _panel(app)
    assert first.status_code == 201, first.get_json()
    user = first.get_json()["user"]
    assert user["external_id"] == PROLIFIC_ID and first.get_json()["created"] is True
    assert api.get("/api/tasks").status_code == 200  # logged in, no password
    again = api.post("/api/auth/panel", json={"external_id": PROLIFIC_ID, "consent": True})  # the same browser
    assert again.status_code == 200 and again.get_json()["created"] is False
    assert again.get_json()["user"]["participant_code"] == user["participant_code"]
    runtime = app.extensions["memory_lab"]
    with runtime.db.Session() as session:
        users = session.scalars(select(User).where(User.external_id == PROLIFIC_ID)).all()
        assert len(users) == 1 and users[0].assignment is not None and users[0].consent_at is not None


@pytest.mark.parametrize("bad", ["", "   ", "has space", "<script>", "x" * 59, "路人甲", None, 12345])
def test_a_malformed_panel_id_gets_a_clear_error_and_no_account(app, bad):
    _, response = _panel(app, bad)
    assert response.status_code == 400
    assert response.get_json()["error"] == "invalid_panel_id"
    with app.extensions["memory_lab"].db.Session() as session:
        assert session.scalar(select(User.id).where(User.role == "participant")) is None


def test_panel_entry_needs_consent(app):
    api = ApiClient(app.test_client())
    response = api.post("/api/auth/panel", json={"external_id": PROLIFIC_ID})
    assert response.status_code == 400 and response.get_json()["error"] == "consent_required"


def test_the_entry_page_reads_the_study_files_parameter(app, client):
    page = client.get(f"/enter?PROLIFIC_PID={PROLIFIC_ID}&STUDY_ID=abc&SESSION_ID=def")
    assert page.status_code == 200 and b"participant.js" in page.data
    wrong = client.get(f"/enter?pid={PROLIFIC_ID}")  # the default name is not this study's parameter
    assert wrong.status_code == 400 and "text/html" in wrong.content_type
    assert "Please use the link your panel gave you" in wrong.get_data(as_text=True)
    assert client.get("/enter?PROLIFIC_PID=%3Cscript%3E").status_code == 400
    assert client.get("/enter").status_code == 400
    assert client.get(f"/enter?PROLIFIC_PID={PROLIFIC_ID}&PROLIFIC_PID=other1").status_code == 400
    assert client.get("/api/study").get_json()["panel"] == {"id_parameter": "PROLIFIC_PID",
                                                            "session_parameters": ["STUDY_ID", "SESSION_ID"]}


def test_completion_code_and_redirect_after_the_questionnaire(app, clock, study):
    api, _ = _panel(app)
    result = walk_task(api, clock, "T1", ["你好，我来自 Prolific。", "我喜欢去爬山。", "我们周末再见。"], study=study)
    assert result["completion"] == {
        "completion_code": "C1WAVE1", "redirect_url": "https://app.prolific.com/submissions/complete?cc=C1WAVE1",
        "incomplete": False}
    assert api.get("/api/tasks/T1").get_json()["task"]["completion"]["completion_code"] == "C1WAVE1"


def test_return_link_logs_in_opens_the_next_task_and_can_be_revoked(app, clock, study, admin_client):
    api, _ = _panel(app)
    walk_task(api, clock, "T1", ["第一次任务。"], study=study)
    link = api.get("/api/me/return-link").get_json()
    assert link["next_task"]["id"] == "T2" and link["next_task"]["status"] == "locked"
    token = link["url"].rsplit("/r/", 1)[1]
    assert len(token) >= 40
    runtime = app.extensions["memory_lab"]
    with runtime.db.Session() as session:
        stored = session.scalars(select(ReturnLink)).all()
        assert stored and all(token not in (r.token_hash or "") for r in stored)  # only the hash is kept
        expires = max(r.expires_at for r in stored)
    # the study ends 16 days (last unlock) + 7 grace days after T1 was done
    assert expires - clock.now() > timedelta(days=22)

    browser = ApiClient(app.test_client())
    assert browser.get("/api/tasks").status_code == 401
    opened = browser.get(f"/r/{token}")
    assert opened.status_code == 302 and opened.headers["Location"].endswith("/#/tasks")
    assert browser.get("/api/auth/me").get_json()["user"]["external_id"] == PROLIFIC_ID
    clock.advance(days=2.01)  # T2 unlocks: the link now opens it
    assert ApiClient(app.test_client()).get(f"/r/{token}").headers["Location"].endswith("/#/task/T2")

    pid = api.get("/api/auth/me").get_json()["user"]["id"]
    links = admin_client.get(f"/api/admin/participants/{pid}").get_json()["return_links"]
    assert links["issued"] == 1 and links["live"] == 1 and links["last_used_at"] is not None
    assert token not in str(admin_client.get(f"/api/admin/participants/{pid}").get_json())
    assert admin_client.post(f"/api/admin/participants/{pid}/return-link/revoke").get_json()["revoked"] >= 1
    refused = ApiClient(app.test_client()).get(f"/r/{token}")
    assert refused.status_code == 404 and "not valid" in refused.get_data(as_text=True)
    new = admin_client.post(f"/api/admin/participants/{pid}/return-link").get_json()["url"]
    assert ApiClient(app.test_client()).get("/r/" + new.rsplit("/r/", 1)[1]).status_code == 302
    assert ApiClient(app.test_client()).get("/r/not-a-token").status_code == 404


def test_return_links_expire_at_the_end_of_the_study(app, clock, study):
    api, _ = _panel(app)
    url = api.get("/api/me/return-link").get_json()["url"]
    token = url.rsplit("/r/", 1)[1]
    clock.advance(days=16 + 7 + 1)
    assert ApiClient(app.test_client()).get(f"/r/{token}").status_code == 404


def test_calendar_file_has_the_unlock_time_and_a_return_link(app, clock, study):
    from icalendar import Calendar

    api, _ = _panel(app)
    assert api.get("/api/me/next-task.ics").status_code == 200  # T1: open now
    walk_task(api, clock, "T1", ["日历测试。"], study=study)
    done_at = clock.now()
    response = api.get("/api/me/next-task.ics")
    assert response.status_code == 200 and response.mimetype == "text/calendar"
    event = Calendar.from_ical(response.data).walk("VEVENT")[0]
    start = event.decoded("dtstart").replace(tzinfo=None)
    assert abs((start - (done_at + timedelta(days=2))).total_seconds()) < 2
    url = str(event.get("url"))
    assert "/r/" in url
    assert ApiClient(app.test_client()).get("/r/" + url.rsplit("/r/", 1)[1]).status_code == 302


def test_password_login_still_works_beside_panel_entry(make_participant, client):
    make_participant("withpassword")
    assert client.login("withpassword", "correct-horse-1").status_code == 200


@pytest.mark.parametrize(("field", "value"), [
    ("typing_ms", -1), ("keystrokes", True), ("pasted_chars", "12"), ("focus_losses", 1.5),
    ("typing_ms", 24 * 3600 * 1000 + 1), ("keystrokes", 200_001), ("pasted_chars", 10**7), ("focus_losses", 10_001),
])
def test_quality_fields_are_validated(make_participant, field, value):
    api = make_participant()
    api.post("/api/tasks/T1/start")
    response = api.post("/api/tasks/T1/messages", json={"content": "你好", field: value})
    assert response.status_code == 400
    assert response.get_json()["error"] == "invalid_quality_signal"
    assert field in response.get_json()["details"]["fields"]


def test_quality_fields_are_stored_with_the_message(app, make_participant):
    api = make_participant()
    api.post("/api/tasks/T1/start")
    signals = {"typing_ms": 8200, "keystrokes": 31, "pasted_chars": 0, "focus_losses": 2}
    assert api.post("/api/tasks/T1/messages", json={"content": "我自己打的字", **signals}).status_code == 201
    assert api.post("/api/tasks/T1/messages", json={"content": "没有质量字段也可以"}).status_code == 201
    with app.extensions["memory_lab"].db.Session() as session:
        rows = session.scalars(select(Message).where(Message.role == "user").order_by(Message.id)).all()
        assert {k: getattr(rows[0], k) for k in signals} == signals
        assert rows[1].typing_ms is None and rows[1].pasted_chars is None


def test_payments_sheet_and_panel_upload(app, clock, study, admin_client, make_participant):
    panel_api, _ = _panel(app)
    walk_task(panel_api, clock, "T1", ["这是第一次任务。", "这是第二条消息。", "这是第三条消息。"], study=study)
    make_participant("nobody_owed")
    sheet = list(csv.DictReader(io.StringIO(admin_client.get("/api/admin/payments.csv").get_data(as_text=True))))
    by_id = {row["external_id"]: row for row in sheet}
    assert by_id[PROLIFIC_ID]["tasks_done"] == "1" and by_id[PROLIFIC_ID]["completed_tasks"] == "T1"
    assert (by_id[PROLIFIC_ID]["task_amount"], by_id[PROLIFIC_ID]["bonus"], by_id[PROLIFIC_ID]["total"]) == (
        "1.50", "0.00", "1.50")
    assert by_id[""]["total"] == "0.00" and by_id[PROLIFIC_ID]["currency"] == "GBP"
    upload = admin_client.get("/api/admin/payments.csv?upload=1").get_data(as_text=True)
    assert upload == f"{PROLIFIC_ID},1.50\r\n"
    for task_id in ("T2", "T3", "T4"):
        clock.advance(days=16)
        walk_task(panel_api, clock, task_id, ["我们继续聊天吧。", "我还有事想说。", "好的，下次再聊。"], study=study)
    upload = admin_client.get("/api/admin/payments.csv?upload=1").get_data(as_text=True)
    assert upload == f"{PROLIFIC_ID},11.00\r\n"  # 1.5 + 2 + 2 + 2.5 + bonus 3


def test_payments_cli(app, clock, study, tmp_path):
    api, _ = _panel(app)
    walk_task(api, clock, "T1", ["这是第一次任务。", "这是第二条消息。", "这是第三条消息。"], study=study)
    out = tmp_path / "pay.csv"
    result = app.test_cli_runner().invoke(args=["payments", "--out", str(out), "--upload"])
    assert result.exit_code == 0, result.output
    assert out.read_bytes().decode("utf-8") == f"{PROLIFIC_ID},1.50\r\n"
