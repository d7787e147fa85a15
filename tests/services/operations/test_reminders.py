"""Reminders for an unlocked task go out once per channel, each with a working personal return link,
through a real SMTP server and a real webhook receiver on 127.0.0.1; failures are recorded and retried."""
from __future__ import annotations

import io
import json
import threading
import zipfile
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from cryptography.fernet import Fernet
from sqlalchemy import select, text

from database.models import Reminder
from services.operations import scheduler
from services.operations.scheduler import ReminderConfig
from services.platform.clock import parse_utc_iso
from services.reporting.export_service import ExportOptions, export_runtime
from tests.conftest import ApiClient, walk_task
from tests.services.operations.test_scheduler import SmtpSink

PANEL_ID = "wjx_778899"
EMAIL = "returning.participant@example.org"


class _WebhookHandler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:  # noqa: N802 - the name http.server calls
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.server.received.append({"json": json.loads(body), "authorization": self.headers.get("Authorization")})
        status = 500 if self.server.failing.is_set() else 204
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args) -> None:
        return None


class WebhookSink(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _WebhookHandler)
        self.received: list[dict] = []
        self.failing = threading.Event()


def _serve(server):
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    return server


@pytest.fixture
def smtp():
    server = _serve(SmtpSink())
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture
def webhook():
    server = _serve(WebhookSink())
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture
def settings(settings):
    settings.contact_encryption_key = Fernet.generate_key().decode()
    settings.public_base_url = "https://study.example.org/"
    return settings


@pytest.fixture
def runtime(app):
    return app.extensions["memory_lab"]


def _config(smtp, webhook) -> ReminderConfig:
    host, port = smtp.server_address
    return ReminderConfig(enabled=True, smtp_host=host, smtp_port=port, sender="lab@example.org",
                          channels=("email", "webhook"),
                          webhook_url=f"http://127.0.0.1:{webhook.server_address[1]}/remind",
                          webhook_token="hook-secret", webhook_timeout=5)


def _who_opens(app, url: str) -> tuple[int, str, dict | None]:
    """Open a return link in a fresh client: (status, redirect target, the user it logged in)."""
    assert url.startswith("https://study.example.org/r/")
    browser = ApiClient(app.test_client())
    response = browser.get(url.removeprefix("https://study.example.org"))
    me = browser.get("/api/auth/me")
    return response.status_code, response.headers.get("Location", ""), (me.get_json() or {}).get("user")


def test_unlock_reminders_go_out_once_with_valid_return_links(app, runtime, make_participant, admin_client, clock,
                                                              study, smtp, webhook):
    panel = ApiClient(app.test_client())
    assert panel.post("/api/auth/panel", json={"external_id": PANEL_ID, "consent": True}).status_code == 201
    emailer = make_participant("emailer")
    assert emailer.post("/api/me/contact", json={"channel": "email", "value": EMAIL}).status_code == 200
    quitter = make_participant("quitter")
    assert quitter.post("/api/me/contact", json={"channel": "email", "value": "quitter@example.org"}).status_code == 200
    for api in (panel, emailer, quitter):
        walk_task(api, clock, "T1", ["第一次任务。"], study=study)
    quitter_id = quitter.get("/api/auth/me").get_json()["user"]["id"]
    assert admin_client.post(f"/api/admin/participants/{quitter_id}/withdraw", json={}).status_code == 200
    config = _config(smtp, webhook)

    assert scheduler.send_reminders(runtime, config)["sent"] == []  # T2 is not open yet
    clock.advance(days=study.tasks[1].unlock_offset_days + 0.01)
    result = scheduler.send_reminders(runtime, config)
    assert sorted((s["task_id"], s["kind"], s["channel"]) for s in result["sent"]) == [
        ("T2", "unlocked", "email"), ("T2", "unlocked", "webhook")]
    assert result["failed"] == []

    # e-mail: one message, to the address the participant gave, with a link that logs them in at T2
    assert len(smtp.received) == 1 and smtp.received[0]["to"] == [EMAIL]
    body = smtp.received[0]["message"].get_content()
    url = next(word for word in body.split() if "/r/" in word)
    status, target, user = _who_opens(app, url)
    assert (status, target, user["username"]) == (302, "/#/task/T2", "emailer")

    # webhook: one JSON POST for the panel participant, with their panel id and a working link
    assert len(webhook.received) == 1
    payload, auth = webhook.received[0]["json"], webhook.received[0]["authorization"]
    assert auth == "Bearer hook-secret"
    assert (payload["event"], payload["kind"], payload["task_id"], payload["external_id"], payload["contact"]) == (
        "task_reminder", "unlocked", "T2", PANEL_ID, PANEL_ID)
    assert payload["return_link"] in payload["text"]
    status, target, user = _who_opens(app, payload["return_link"])
    assert (status, target, user["external_id"]) == (302, "/#/task/T2", PANEL_ID)

    # once: the next runs send nothing more
    for _ in range(2):
        clock.advance(3600)
        assert scheduler.send_reminders(runtime, config)["sent"] == []
    assert len(smtp.received) == 1 and len(webhook.received) == 1

    # the monitor shows what went out; the address is in neither the database in clear nor the export
    rows = {r["username"]: r for r in admin_client.get("/api/admin/participants").get_json()["participants"]}
    assert [(r["kind"], r["channel"], r["status"]) for r in rows["emailer"]["reminders"]] == [
        ("unlocked", "email", "sent")]
    assert rows["quitter"]["reminders"] == []
    with runtime.db.engine.connect() as conn:
        raw = conn.execute(text("SELECT encrypted FROM contact_details")).scalars().all()
    assert raw and all(EMAIL.encode() not in bytes(value) for value in raw)
    archive = zipfile.ZipFile(io.BytesIO(export_runtime(runtime, options=ExportOptions()).data))
    assert all(EMAIL not in archive.read(name).decode("utf-8") for name in archive.namelist())

    # overdue: one more reminder per channel, once
    clock.advance(days=study.timing.overdue_after_days)
    overdue = scheduler.send_reminders(runtime, config)
    assert sorted((s["kind"], s["channel"]) for s in overdue["sent"]) == [("overdue", "email"), ("overdue", "webhook")]
    assert scheduler.send_reminders(runtime, config)["sent"] == []


def _panel_participant_with_t2_open(app, clock, study) -> None:
    """A panel participant (no e-mail: the webhook is their channel) who did T1; T2 has just unlocked."""
    panel = ApiClient(app.test_client())
    assert panel.post("/api/auth/panel", json={"external_id": PANEL_ID, "consent": True}).status_code == 201
    walk_task(panel, clock, "T1", ["第一次任务。"], study=study)
    clock.advance(days=study.tasks[1].unlock_offset_days + 0.01)


def test_a_failed_reminder_is_recorded_shown_and_retried(app, runtime, admin_client, clock, study, smtp, webhook):
    _panel_participant_with_t2_open(app, clock, study)
    config = _config(smtp, webhook)
    webhook.failing.set()
    result = scheduler.send_reminders(runtime, config)
    assert result["sent"] == [] and [(f["channel"], f["kind"]) for f in result["failed"]] == [("webhook", "unlocked")]
    row = admin_client.get("/api/admin/participants").get_json()["participants"][0]
    assert row["reminders"][0]["status"] == "failed" and "500" in row["reminders"][0]["error"]

    webhook.failing.clear()
    assert [s["channel"] for s in scheduler.send_reminders(runtime, config)["sent"]] == ["webhook"]
    with runtime.db.Session() as session:
        reminder = session.scalar(select(Reminder))
        assert (reminder.status, reminder.attempts) == ("sent", 2)
    assert len(webhook.received) == 2  # the failed POST and the retry, nothing more
    assert scheduler.send_reminders(runtime, config)["sent"] == []


def _crashed_mid_send(runtime, clock, attempts: int) -> None:
    """What a process that died between claiming the reminder and recording its outcome leaves behind."""
    with runtime.db.session() as session:
        user_id = session.execute(text("SELECT id FROM users WHERE external_id = :e"), {"e": PANEL_ID}).scalar_one()
        session.add(Reminder(user_id=user_id, task_id="T2", kind="unlocked", channel="webhook", status="sending",
                             attempts=attempts, created_at=clock.now(), claimed_at=clock.now()))


def test_a_reminder_cut_off_mid_send_is_retried_once_it_is_stale(app, runtime, admin_client, clock, study, smtp,
                                                                 webhook):
    _panel_participant_with_t2_open(app, clock, study)
    config = _config(smtp, webhook)
    _crashed_mid_send(runtime, clock, attempts=1)
    # still within a send's time: another process may be sending it right now
    assert scheduler.send_reminders(runtime, config)["sent"] == [] and webhook.received == []
    clock.advance(seconds=scheduler.STALE_SENDING_SECONDS + 1)
    assert [s["channel"] for s in scheduler.send_reminders(runtime, config)["sent"]] == ["webhook"]
    with runtime.db.Session() as session:
        reminder = session.scalar(select(Reminder))
        assert (reminder.status, reminder.attempts) == ("sent", 2)
    assert len(webhook.received) == 1
    assert scheduler.send_reminders(runtime, config)["sent"] == []


def test_a_last_attempt_cut_off_mid_send_shows_as_failed(app, runtime, admin_client, clock, study, smtp, webhook):
    _panel_participant_with_t2_open(app, clock, study)
    _crashed_mid_send(runtime, clock, attempts=scheduler.MAX_ATTEMPTS)
    clock.advance(seconds=scheduler.STALE_SENDING_SECONDS + 1)
    assert scheduler.send_reminders(runtime, _config(smtp, webhook))["sent"] == [] and webhook.received == []
    row = admin_client.get("/api/admin/participants").get_json()["participants"][0]
    assert row["reminders"][0]["status"] == "failed" and "interrupted" in row["reminders"][0]["error"]


def test_contact_details_need_the_key_and_a_valid_address(app, make_participant, settings):
    api = make_participant()
    bad = api.post("/api/me/contact", json={"channel": "email", "value": "not-an-address"})
    assert bad.status_code == 400 and bad.get_json()["error"] == "invalid_contact"
    assert api.post("/api/me/contact", json={"channel": "pigeon", "value": "x"}).status_code == 400
    assert api.post("/api/me/contact", json={"channel": "email", "value": EMAIL}).get_json()["channels"] == ["email"]
    assert api.post("/api/me/contact", json={"channel": "email", "value": ""}).get_json()["channels"] == []
    settings.contact_encryption_key = None
    off = api.post("/api/me/contact", json={"channel": "email", "value": EMAIL})
    assert off.status_code == 409 and off.get_json()["error"] == "contacts_disabled"


def test_reminder_channels_from_the_environment():
    config = ReminderConfig.from_env({"REMINDERS_ENABLED": "1", "REMINDER_CHANNELS": "email, webhook",
                                      "REMINDER_WEBHOOK_URL": "http://127.0.0.1:9/hook",
                                      "REMINDER_WEBHOOK_TOKEN": "t"})
    assert (config.channels, config.webhook_url, config.webhook_token) == (
        ("email", "webhook"), "http://127.0.0.1:9/hook", "t")
    with pytest.raises(ValueError, match="REMINDER_WEBHOOK_URL"):
        scheduler.send_reminders(None, ReminderConfig(enabled=True, channels=("webhook",)))


def test_reminder_text_fits_the_channel_and_the_participants_time_zone(app, runtime, clock, study, smtp, webhook):
    panel = ApiClient(app.test_client())
    assert panel.post("/api/auth/panel", json={"external_id": PANEL_ID, "consent": True,
                                               "language": "en"}).status_code == 201
    assert panel.post("/api/me/time-zone", json={"time_zone": "Not/AZone"}).status_code == 400
    assert panel.post("/api/me/time-zone", json={"time_zone": "Asia/Tokyo"}).get_json() == {"time_zone": "Asia/Tokyo"}
    walk_task(panel, clock, "T1", ["第一次任务。"], study=study)
    clock.advance(days=study.tasks[1].unlock_offset_days + 0.01)
    result = scheduler.send_reminders(runtime, _config(smtp, webhook))
    assert [s["channel"] for s in result["sent"]] == ["webhook"]
    payload = webhook.received[0]["json"]
    unlock = parse_utc_iso(payload["available_at"])
    tokyo = (unlock + timedelta(hours=9)).strftime("%Y-%m-%d %H:%M")
    assert f"{tokyo} (Asia/Tokyo)" in payload["text"]
    assert "reply to this e-mail" not in payload["text"] and "let the research team know" in payload["text"]


def test_e_mail_reminders_keep_the_reply_line_and_say_utc_until_a_zone_is_known():
    entry = {"kind": "unlocked", "language": "zh", "title": "记忆", "task_id": "T2",
             "available_at": "2026-03-04T09:00:00Z", "time_zone": None}
    _, email = scheduler.reminder_text(entry, "https://study.example.org/r/x", "email")
    assert "回复这封邮件" in email and "2026-03-04 09:00 (UTC)" in email
    _, hook = scheduler.reminder_text(entry | {"time_zone": "Europe/London"}, None, "webhook")
    assert "回复这封邮件" not in hook and "2026-03-04 09:00 (Europe/London)" in hook
