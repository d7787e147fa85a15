"""Scheduler jobs, called directly with the manual clock: sweep, overdue marking, reminder e-mails."""
from __future__ import annotations

import email
import email.policy
import socketserver
import threading

import pytest
from sqlalchemy import select

from config import Settings, reminders_from_env, scheduler_intervals_from_env
from database.models import AuditLog, ConsolidationRun, TaskSession, User
from services.operations import reminders, scheduler
from services.operations.reminders import ReminderConfig
from tests.conftest import walk_task
from tests.routes.test_admin_actions import DeferredRunner


def _id(api) -> int:
    return api.get("/api/auth/me").get_json()["user"]["id"]


@pytest.fixture
def runtime(app):
    return app.extensions["memory_lab"]


# -- a real SMTP server on 127.0.0.1 that keeps what it receives -----------------------------------------


class _SmtpHandler(socketserver.StreamRequestHandler):
    def _reply(self, line: str) -> None:
        self.wfile.write((line + "\r\n").encode("ascii"))

    def handle(self) -> None:
        self._reply("220 sink ESMTP")
        envelope = {"from": None, "to": []}
        while True:
            raw = self.rfile.readline()
            if not raw:
                return
            command = raw.decode("utf-8", "replace").strip()
            verb = command.split(" ", 1)[0].upper()
            if verb in ("EHLO", "HELO"):
                self._reply("250-sink")
                self._reply("250 8BITMIME")
            elif verb == "MAIL":
                envelope = {"from": command.split(":", 1)[1].strip(" <>"), "to": []}
                self._reply("250 ok")
            elif verb == "RCPT":
                envelope["to"].append(command.split(":", 1)[1].strip(" <>"))
                self._reply("250 ok")
            elif verb == "DATA":
                self._reply("354 go ahead")
                lines = []
                while (line := self.rfile.readline()) not in (b".\r\n", b""):
                    lines.append(line[1:] if line.startswith(b"..") else line)
                self.server.received.append({**envelope, "message": email.message_from_bytes(
                    b"".join(lines), policy=email.policy.default)})
                self._reply("250 queued")
            elif verb == "QUIT":
                self._reply("221 bye")
                return
            else:
                self._reply("250 ok")


class SmtpSink(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _SmtpHandler)
        self.received: list[dict] = []


@pytest.fixture
def smtp_sink():
    server = SmtpSink()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


# -- consolidation sweep ---------------------------------------------------------------------------------


def test_sweep_closes_abandoned_chats_and_consolidates_them(runtime, make_participant, clock, study):
    alice = make_participant("alice")
    assert alice.post("/api/tasks/T1/start").status_code == 201
    assert alice.post("/api/tasks/T1/messages", json={"content": "我叫爱丽丝，我在北京上学。"}).status_code == 201
    # still within its time:
    assert scheduler.sweep_consolidation(runtime) == {"closed": [], "runs": [], "turn_upkeep": []}
    clock.advance(study.timing.max_wall_seconds + 1)
    result = scheduler.sweep_consolidation(runtime)
    assert len(result["closed"]) == 1
    assert [(r["task_session_id"], r["status"], r["trigger"]) for r in result["runs"]] == [
        (result["closed"][0], "succeeded", "sweep")]
    with runtime.db.Session() as session:
        ts = session.get(TaskSession, result["closed"][0])
        assert (ts.phase, ts.end_reason, ts.consolidation_status) == ("questionnaire", "abandoned", "done")
    # nothing left to do: a second sweep is a no-op
    assert scheduler.sweep_consolidation(runtime) == {"closed": [], "runs": [], "turn_upkeep": []}


def test_sweep_catches_a_task_whose_consolidation_never_ran(runtime, make_participant, clock, study):
    runtime.background = DeferredRunner()
    alice = make_participant("alice")
    walk_task(alice, clock, "T1", ["我对猫毛过敏。"], study=study)
    result = scheduler.sweep_consolidation(runtime)
    assert result["closed"] == []
    assert [(r["user_id"], r["status"]) for r in result["runs"]] == [(_id(alice), "succeeded")]
    with runtime.db.Session() as session:
        assert session.scalars(select(ConsolidationRun.trigger)).all() == ["sweep"]


class OutageEmbedder:
    """An embedding service that is down: every call fails, as a real outage would."""

    name = "outage"
    model = "outage-embedder"

    def embed_passages(self, texts):
        raise ConnectionError("embedding service unreachable")

    embed_queries = embed_passages


def test_a_failed_consolidation_waits_before_the_sweep_retries_it(runtime, make_participant, admin_client, clock,
                                                                  study):
    runtime.background = DeferredRunner()
    alice = make_participant("alice")
    walk_task(alice, clock, "T1", ["我今天很开心。"], study=study)
    working = runtime.embedder
    runtime.embedder = OutageEmbedder()
    assert [r["status"] for r in scheduler.sweep_consolidation(runtime)["runs"]] == ["failed"]
    clock.advance(60)
    assert scheduler.sweep_consolidation(runtime)["runs"] == []  # not hammering the outage every minute
    # an admin can still retry at once
    manual = admin_client.post(f"/api/admin/participants/{_id(alice)}/consolidate").get_json()["runs"]
    assert [r["status"] for r in manual] == ["failed"]
    runtime.embedder = working
    clock.advance(scheduler.FAILED_RETRY_MINUTES * 60 - 30)
    assert scheduler.sweep_consolidation(runtime)["runs"] == []
    clock.advance(60)
    assert [r["status"] for r in scheduler.sweep_consolidation(runtime)["runs"]] == ["succeeded"]
    with runtime.db.Session() as session:
        statuses = session.scalars(select(ConsolidationRun.status).order_by(ConsolidationRun.id)).all()
        assert statuses == ["failed", "failed", "succeeded"]


# -- overdue ---------------------------------------------------------------------------------------------


def test_overdue_is_marked_once_and_never_for_withdrawn(runtime, make_participant, admin_client, clock, study):
    alice, bob, carol = make_participant("alice"), make_participant("bob"), make_participant("carol")
    walk_task(alice, clock, "T1", ["你好"], study=study)
    assert admin_client.post(f"/api/admin/participants/{_id(carol)}/withdraw", json={}).status_code == 200
    assert scheduler.mark_overdue(runtime) == []
    # bob never started T1 (open since registration); alice's T2 opens 2 days after her T1
    clock.advance(days=study.timing.overdue_after_days + 0.01)
    marked = scheduler.mark_overdue(runtime)
    assert [(m["user_id"], m["task_id"]) for m in marked] == [(_id(bob), "T1")]
    clock.advance(days=2)
    marked = scheduler.mark_overdue(runtime)
    assert [(m["user_id"], m["task_id"]) for m in marked] == [(_id(alice), "T2")]
    assert scheduler.mark_overdue(runtime) == []
    with runtime.db.Session() as session:
        rows = session.scalars(select(AuditLog).where(AuditLog.action == "participant_overdue")).all()
        assert sorted((r.target_user_id, r.details["task_id"]) for r in rows) == sorted(
            [(_id(bob), "T1"), (_id(alice), "T2")])
        assert _id(carol) not in {r.target_user_id for r in rows}


# -- reminders --------------------------------------------------------------------------------------------


def _config(smtp_sink, contacts, **extra) -> ReminderConfig:
    host, port = smtp_sink.server_address
    return ReminderConfig(enabled=True, smtp_host=host, smtp_port=port, sender="lab@example.org",
                          contacts_path=str(contacts), **extra)


def test_reminders_go_to_active_participants_once_per_task_and_kind(runtime, make_participant, admin_client, clock,
                                                                   study, smtp_sink, tmp_path):
    make_participant("alice")  # zh
    make_participant("bob", language="en")
    carol = make_participant("carol")  # withdrawn, has an address all the same
    make_participant("dave")  # overdue but no address on file
    erin = make_participant("erin")  # started in time: not overdue; T2 unlocks two days after
    walk_task(erin, clock, "T1", ["准时完成"], study=study)
    codes = {u.username: u.participant_code for u in _users(runtime)}
    contacts = tmp_path / "contacts.csv"
    contacts.write_text("participant_code,email\n" + "\n".join(
        f"{codes[name]},{name}@example.org" for name in ("alice", "bob", "carol", "erin")) + "\n",
        encoding="utf-8")
    assert admin_client.post(f"/api/admin/participants/{_id(carol)}/withdraw", json={}).status_code == 200
    config = _config(smtp_sink, contacts, digest_to="pi@example.org")

    assert scheduler.send_reminders(runtime, config)["sent"] == []  # T1 opened at consent; nobody overdue yet
    clock.advance(days=study.timing.overdue_after_days + 0.01)
    result = scheduler.send_reminders(runtime, config)
    assert sorted((s["participant_code"], s["task_id"], s["kind"]) for s in result["sent"]) == sorted(
        [(codes["alice"], "T1", "overdue"), (codes["bob"], "T1", "overdue"), (codes["erin"], "T2", "unlocked")])
    assert result["no_contact"] == [codes["dave"]] and result["digest"] is True
    received = {m["to"][0]: m["message"] for m in smtp_sink.received}
    assert set(received) == {"alice@example.org", "bob@example.org", "erin@example.org", "pi@example.org"}
    assert received["alice@example.org"]["Subject"] == "AI Memory Lab：你的下一个任务已经开放"
    assert "认识一下" in received["alice@example.org"].get_content()
    assert received["bob@example.org"]["Subject"] == "AI Memory Lab: your next task is open"
    assert "Getting to know each other" in received["bob@example.org"].get_content()
    digest = received["pi@example.org"].get_content()
    assert codes["dave"] in digest and codes["carol"] not in digest and "@" not in digest.split("\n", 1)[1]
    with runtime.db.Session() as session:
        audit = session.scalars(select(AuditLog).where(AuditLog.action == "reminder_sent")).all()
        assert len(audit) == 3 and all("example.org" not in str(a.details) for a in audit)

    # each reminder goes out once: not an hour later, nor a day later; erin's T2 turns overdue once
    smtp_sink.received.clear()
    clock.advance(3600)
    assert scheduler.send_reminders(runtime, config)["sent"] == []
    assert smtp_sink.received == []
    clock.advance(days=study.timing.overdue_after_days)
    again = scheduler.send_reminders(runtime, config)
    assert [(s["participant_code"], s["task_id"], s["kind"]) for s in again["sent"]] == [
        (codes["erin"], "T2", "overdue")]


def test_reminders_are_off_by_default(runtime, make_participant, clock, study, smtp_sink, tmp_path):
    make_participant("alice")
    clock.advance(days=study.timing.overdue_after_days + 1)
    assert reminders_from_env({}).enabled is False
    off = ReminderConfig(enabled=False, smtp_host=smtp_sink.server_address[0], smtp_port=smtp_sink.server_address[1])
    assert scheduler.send_reminders(runtime, off) == {"enabled": False, "sent": [], "failed": [],
                                                      "no_contact": [], "digest": False}
    assert smtp_sink.received == []


def test_reminder_config_from_environment(tmp_path):
    config = reminders_from_env({"REMINDERS_ENABLED": "1", "SMTP_HOST": "mail.lab", "SMTP_PORT": "587",
                                 "SMTP_STARTTLS": "yes", "REMINDER_CONTACTS": str(tmp_path / "c.csv"),
                                 "REMINDER_RESEND_HOURS": "48"})
    assert (config.enabled, config.smtp_host, config.smtp_port, config.starttls, config.resend_hours) == (
        True, "mail.lab", 587, True, 48.0)
    (tmp_path / "c.csv").write_text("\ufeffparticipant_code,email\nPABC, a@b.c \n,skipped@x\n", encoding="utf-8")
    assert reminders.load_contacts(str(tmp_path / "c.csv")) == {"PABC": "a@b.c"}


def _users(runtime) -> list[User]:
    with runtime.db.Session() as session:
        return list(session.scalars(select(User)))


# -- the timer -------------------------------------------------------------------------------------------


def test_job_intervals_follow_pilot_mode():
    real = Settings(database_url="sqlite://", secret_key="x", study={"x": 1})
    pilot = Settings(database_url="sqlite://", secret_key="x", day_seconds=8, study={"x": 1})
    assert scheduler.job_intervals(real) == {"consolidation_sweep": 60.0, "mark_overdue": 300.0,
                                             "send_reminders": 3600.0, "answer_unanswered": 15.0}
    assert scheduler.job_intervals(pilot)["consolidation_sweep"] == 2.0
    real.scheduler_intervals = scheduler_intervals_from_env({"SCHEDULER_SWEEP_SECONDS": "15"})
    assert scheduler.job_intervals(real)["consolidation_sweep"] == 15.0
    assert scheduler.job_intervals(real)["mark_overdue"] == 300.0


def test_start_scheduler_registers_the_jobs(app, monkeypatch):
    sched = scheduler.start_scheduler(app, start=True)
    try:
        assert sched.running
        jobs = sorted(job.id for job in sched.get_jobs())
        assert jobs == ["answer_unanswered", "consolidation_sweep", "mark_overdue", "scheduler_lease"]
    finally:
        sched.shutdown(wait=False)
    monkeypatch.setattr(app.extensions["memory_lab"].settings, "reminders", ReminderConfig(enabled=True))
    assert "send_reminders" in {job.id for job in scheduler.start_scheduler(app, start=False).get_jobs()}
