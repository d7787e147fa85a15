"""Background jobs (APScheduler): the consolidation sweep, overdue marking, optional reminder e-mails.

Each job is a plain function of the app's ``Runtime`` so tests and the
``flask run-jobs`` command call it directly; ``start_scheduler(app)`` only puts
them on a timer.

* ``sweep_consolidation`` closes task chats open longer than the maximum wall
  time, then consolidates every closed task whose consolidation is pending or
  failed (a missed ``task_end`` trigger, a crash, a provider outage).
* ``mark_overdue`` records, once, each active participant whose next task has
  been available longer than ``overdue_after_days`` without being started
  (audit action ``participant_overdue``); the monitor shows the same live.
* ``send_reminders`` (off unless ``REMINDERS_ENABLED=1``) e-mails overdue,
  active participants through the configured SMTP server. The study database
  holds no e-mail addresses: the lab keeps them in a CSV file of
  ``participant_code,email`` named by ``REMINDER_CONTACTS``. Withdrawn
  participants are never contacted; a participant gets at most one reminder per
  task per ``REMINDER_RESEND_HOURS``. ``REMINDER_DIGEST_TO`` additionally sends
  the lab a list of overdue participant codes.
"""
from __future__ import annotations

import atexit
import csv
import logging
import os
import smtplib
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from email.message import EmailMessage
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from config import Settings
from database.models import AuditLog, User
from services import admin_service
from services.chat_service import catch_up_turn_upkeep
from services.leases import SchedulerLeadership
from services.runtime import Runtime
from services.timer_service import TaskService

log = logging.getLogger(__name__)

OVERDUE_ACTION = "participant_overdue"
REMINDER_ACTION = "reminder_sent"
DIGEST_ACTION = "overdue_digest_sent"
FAILED_RETRY_MINUTES = 15.0


def _truthy(raw: str | None) -> bool:
    return (raw or "").strip().lower() in {"1", "true", "yes", "on"}


@dataclass
class ReminderConfig:
    enabled: bool = False
    smtp_host: str = "localhost"
    smtp_port: int = 25
    smtp_user: str | None = None
    smtp_password: str | None = None
    starttls: bool = False
    sender: str = "memory-lab@localhost"
    contacts_path: str | None = None
    digest_to: str | None = None
    resend_hours: float = 24.0
    base_url: str | None = None

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> ReminderConfig:
        env = os.environ if environ is None else environ
        return cls(
            enabled=_truthy(env.get("REMINDERS_ENABLED")),
            smtp_host=env.get("SMTP_HOST", "localhost"),
            smtp_port=int(env.get("SMTP_PORT", "25")),
            smtp_user=env.get("SMTP_USER") or None,
            smtp_password=env.get("SMTP_PASSWORD") or None,
            starttls=_truthy(env.get("SMTP_STARTTLS")),
            sender=env.get("REMINDER_FROM", "memory-lab@localhost"),
            contacts_path=env.get("REMINDER_CONTACTS") or None,
            digest_to=env.get("REMINDER_DIGEST_TO") or None,
            resend_hours=float(env.get("REMINDER_RESEND_HOURS", "24")),
            base_url=env.get("REMINDER_BASE_URL") or None,
        )


def _tasks(session: Session, runtime: Runtime) -> TaskService:
    return TaskService(session, runtime.study, time_scale=runtime.settings.time_scale,
                       timer_scale=runtime.settings.timer_scale, clock=runtime.clock)


# -- consolidation sweep ----------------------------------------------------------------------------


def sweep_consolidation(runtime: Runtime, *, failed_retry_minutes: float = FAILED_RETRY_MINUTES) -> dict[str, Any]:
    """Close abandoned chats, consolidate every closed task still waiting for it, and run the
    per-turn memory upkeep (S1's summary rewrite) that never ran (a worker died with it queued).

    A task whose consolidation failed is retried once ``failed_retry_minutes`` have passed."""
    with runtime.db.Session() as session:
        closed = _tasks(session, runtime).close_abandoned()
        closed_ids = [ts.id for ts in closed]
        session.commit()
    cutoff = runtime.clock.now() - timedelta(minutes=failed_retry_minutes)
    runs = admin_service.consolidate_pending(runtime, trigger="sweep", failed_retry_after=cutoff)
    rewrites = catch_up_turn_upkeep(runtime)
    if closed_ids or runs or rewrites:
        log.info("sweep: closed %d abandoned chat(s); consolidation runs: %s; per-turn upkeep caught up: %d",
                 len(closed_ids), ", ".join(f"{r['task_session_id']}={r['status']}" for r in runs) or "none",
                 len(rewrites))
    return {"closed": closed_ids, "runs": runs, "turn_upkeep": rewrites}


# -- overdue ------------------------------------------------------------------------------------------


def overdue_tasks(session: Session, runtime: Runtime) -> list[dict[str, Any]]:
    """Every (active participant, task) that is available but overdue right now."""
    tasks = _tasks(session, runtime)
    found = []
    for user in session.scalars(select(User).where(User.role == "participant", User.status == "active")
                                .order_by(User.id)):
        for task in tasks.overview(user):
            if task["status"] == "available" and task.get("overdue"):
                found.append({"user_id": user.id, "participant_code": user.participant_code,
                              "language": user.language, "task_id": task["id"], "title": task["title"],
                              "available_at": task["available_at"]})
    return found


def mark_overdue(runtime: Runtime) -> list[dict[str, Any]]:
    """Record each newly overdue (participant, task) once in the audit log; returns the new ones."""
    with runtime.db.session() as session:
        seen = {(a.target_user_id, a.details.get("task_id"), a.details.get("available_at"))
                for a in session.scalars(select(AuditLog).where(AuditLog.action == OVERDUE_ACTION))}
        now = runtime.clock.now()
        new = []
        for entry in overdue_tasks(session, runtime):
            key = (entry["user_id"], entry["task_id"], entry["available_at"])
            if key in seen:
                continue
            session.add(AuditLog(at=now, action=OVERDUE_ACTION, target_user_id=entry["user_id"],
                                 details={"task_id": entry["task_id"], "available_at": entry["available_at"]}))
            new.append(entry)
    if new:
        log.info("overdue: %s", ", ".join(f"{e['participant_code']} {e['task_id']}" for e in new))
    return new


# -- reminders ---------------------------------------------------------------------------------------------


def load_contacts(path: str | None) -> dict[str, str]:
    """participant_code -> e-mail from the lab's contacts CSV (header: participant_code,email)."""
    if not path:
        return {}
    with Path(path).open(encoding="utf-8-sig", newline="") as handle:
        return {row["participant_code"].strip(): row["email"].strip()
                for row in csv.DictReader(handle) if row.get("participant_code") and row.get("email")}


REMINDER_TEXT = {
    "zh": ("AI Memory Lab：你的下一个任务已经开放",
           "你好！\n\n研究中的任务“{title}”（{task_id}）已于 {available_at} 开放，你还没有开始。"
           "方便时请登录完成它。{link}\n\n如果你不想再参加研究，回复这封邮件告诉我们即可。\n\nAI Memory Lab 研究团队"),
    "en": ("AI Memory Lab: your next task is open",
           "Hello,\n\nthe study task \"{title}\" ({task_id}) has been open since {available_at} and has not been "
           "started yet. Please log in and complete it when you can. {link}\n\nIf you no longer wish to take "
           "part, just reply to this e-mail.\n\nThe AI Memory Lab research team"),
}


def _reminder(entry: dict[str, Any], config: ReminderConfig, to: str) -> EmailMessage:
    subject, body = REMINDER_TEXT["en" if entry["language"] == "en" else "zh"]
    message = EmailMessage()
    message["From"] = config.sender
    message["To"] = to
    message["Subject"] = subject
    message.set_content(body.format(title=entry["title"], task_id=entry["task_id"],
                                    available_at=entry["available_at"].replace("T", " ").rstrip("Z") + " UTC",
                                    link=config.base_url or ""))
    return message


def _recent(session: Session, action: str, since: datetime) -> list[AuditLog]:
    return list(session.scalars(select(AuditLog).where(AuditLog.action == action, AuditLog.at >= since)))


SmtpFactory = Callable[..., smtplib.SMTP]


def send_reminders(runtime: Runtime, config: ReminderConfig | None = None, *,
                   smtp_factory: SmtpFactory = smtplib.SMTP) -> dict[str, Any]:
    """E-mail overdue active participants (and the lab's digest address). Off unless enabled."""
    config = config or ReminderConfig.from_env()
    result: dict[str, Any] = {"enabled": config.enabled, "sent": [], "no_contact": [], "digest": False}
    if not config.enabled:
        return result
    contacts = load_contacts(config.contacts_path)
    now = runtime.clock.now()
    since = now - timedelta(hours=config.resend_hours)
    with runtime.db.session() as session:
        due = overdue_tasks(session, runtime)
        reminded = {(a.target_user_id, a.details.get("task_id")) for a in _recent(session, REMINDER_ACTION, since)}
        outgoing: list[tuple[dict[str, Any], EmailMessage]] = []
        for entry in due:
            if (entry["user_id"], entry["task_id"]) in reminded:
                continue
            address = contacts.get(entry["participant_code"])
            if not address:
                result["no_contact"].append(entry["participant_code"])
                continue
            outgoing.append((entry, _reminder(entry, config, address)))
        digest = None
        if config.digest_to and due and not _recent(session, DIGEST_ACTION, since):
            digest = EmailMessage()
            digest["From"] = config.sender
            digest["To"] = config.digest_to
            digest["Subject"] = f"AI Memory Lab: {len(due)} overdue task(s)"
            digest.set_content("Overdue (participant code, task, open since):\n\n" + "\n".join(
                f"{e['participant_code']}  {e['task_id']}  {e['available_at']}" for e in due))
        if not outgoing and digest is None:
            return result
        with smtp_factory(config.smtp_host, config.smtp_port, timeout=30) as smtp:
            if config.starttls:
                smtp.starttls()
            if config.smtp_user:
                smtp.login(config.smtp_user, config.smtp_password or "")
            for entry, message in outgoing:
                smtp.send_message(message)
                # the address stays out of the study database; the code and task are enough to audit
                session.add(AuditLog(at=now, action=REMINDER_ACTION, target_user_id=entry["user_id"],
                                     details={"task_id": entry["task_id"], "channel": "email"}))
                session.commit()  # a later SMTP failure must not make this participant get it twice
                result["sent"].append({"participant_code": entry["participant_code"], "task_id": entry["task_id"]})
            if digest is not None:
                smtp.send_message(digest)
                session.add(AuditLog(at=now, action=DIGEST_ACTION, details={"overdue": len(due)}))
                result["digest"] = True
    return result


# -- the timer ----------------------------------------------------------------------------------------------


def job_intervals(settings: Settings, environ: dict[str, str] | None = None) -> dict[str, float]:
    """Seconds between runs. Pilot mode shortens the sweep and overdue checks with its short days."""
    env = os.environ if environ is None else environ
    quick = max(1.0, min(60.0, settings.day_seconds / 4)) if settings.pilot_mode else 60.0
    return {
        "consolidation_sweep": float(env.get("SCHEDULER_SWEEP_SECONDS") or quick),
        "mark_overdue": float(env.get("SCHEDULER_OVERDUE_SECONDS") or (quick if settings.pilot_mode else 300.0)),
        "send_reminders": float(env.get("SCHEDULER_REMINDER_SECONDS") or 3600.0),
    }


def _led(leadership: SchedulerLeadership, job_id: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` run only in the process that leads the scheduler (the others skip their turn)."""

    def job(*args: Any) -> Any:
        if not leadership.is_leader():
            return None
        log.info("scheduler job %s runs in %s", job_id, leadership.holder)
        return fn(*args)

    job.__name__ = job_id
    return job


def start_scheduler(app, *, start: bool = True):
    """Put the jobs on an APScheduler BackgroundScheduler and start it.

    Every server process may start one; the ``scheduler`` lease in the database makes
    exactly one of them run the jobs (services.leases.SchedulerLeadership), and another
    takes over within a lease period when that process dies."""
    from apscheduler.schedulers.background import BackgroundScheduler

    runtime: Runtime = app.extensions["memory_lab"]
    intervals = job_intervals(runtime.settings)
    leadership = SchedulerLeadership(runtime.db, ttl_seconds=lease_seconds(intervals))
    scheduler = BackgroundScheduler(timezone="UTC", job_defaults={
        "coalesce": True, "max_instances": 1, "misfire_grace_time": 300})
    scheduler.add_job(leadership.renew, "interval", id="scheduler_lease", seconds=leadership.renew_seconds)
    jobs: list[tuple[str, Callable[..., Any], list[Any]]] = [
        ("consolidation_sweep", sweep_consolidation, [runtime]), ("mark_overdue", mark_overdue, [runtime])]
    reminders = ReminderConfig.from_env()
    if reminders.enabled:
        jobs.append(("send_reminders", send_reminders, [runtime, reminders]))
    for job_id, fn, args in jobs:
        scheduler.add_job(_led(leadership, job_id, fn), "interval", args=args, id=job_id, seconds=intervals[job_id])
    if start:
        leadership.renew()
        scheduler.start()
        atexit.register(_stop, scheduler, leadership)
        log.info("scheduler started: %s", ", ".join(f"{job_id} every {intervals[job_id]:g} s" for job_id, _, _ in jobs))
    app.extensions["memory_lab_scheduler"] = scheduler
    app.extensions["memory_lab_scheduler_leadership"] = leadership
    return scheduler


def lease_seconds(intervals: dict[str, float]) -> float:
    """The leadership lease: long enough to ride out a slow renewal, short enough for a quick takeover."""
    return max(15.0, min(45.0, 3 * intervals["consolidation_sweep"]))


def _stop(scheduler, leadership: SchedulerLeadership) -> None:
    if scheduler.running:
        scheduler.shutdown(wait=False)
    leadership.resign()


def run_jobs_once(runtime: Runtime, *, reminders: bool = False) -> dict[str, Any]:
    """Every job once, in order (the ``flask run-jobs`` command, e.g. from cron)."""
    result: dict[str, Any] = {"sweep": sweep_consolidation(runtime), "overdue": mark_overdue(runtime)}
    if reminders:
        result["reminders"] = send_reminders(runtime)
    return result
