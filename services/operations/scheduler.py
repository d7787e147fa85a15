"""Background jobs (APScheduler): the consolidation sweep, overdue marking, optional reminder e-mails.

Each job is a plain function of the app's ``Runtime`` so tests and the
``flask run-jobs`` command call it directly; ``start_scheduler(app)`` only puts
them on a timer.

* ``sweep_consolidation`` closes task chats open longer than the maximum wall
  time, then consolidates every closed task whose consolidation is pending or
  failed (a missed ``task_end`` trigger, a crash, a provider outage).
* ``answer_unanswered`` answers every participant message that was stored and acknowledged but got no
  reply (an overloaded server refused the reply with a 503 and the client did not ask again) a minute
  after it was stored, while its chat is open (services.chat.chat_service.answer_unanswered).
* ``mark_overdue`` records, once, each active participant whose next task has
  been available longer than ``overdue_after_days`` without being started
  (audit action ``participant_overdue``); the monitor shows the same live.
* ``send_reminders`` (off unless ``REMINDERS_ENABLED=1``) reminds each active
  participant when their next task unlocks and again when it is overdue, once
  per task, kind and channel (table ``reminders``: sent or failed, shown in the
  monitor; a failure is retried on later runs, three attempts in all). Each
  reminder carries a fresh personal return link. Channels (``REMINDER_CHANNELS``):
  ``email`` by SMTP, to the address the participant gave (stored encrypted,
  services.participants.contacts) or the lab's ``participant_code,email`` CSV named by
  ``REMINDER_CONTACTS``; ``webhook``, a JSON POST to ``REMINDER_WEBHOOK_URL``
  that the lab forwards by SMS, WeChat or the panel's messages. Withdrawn and
  erased participants are never contacted. ``REMINDER_DIGEST_TO`` additionally
  sends the lab a list of overdue participant codes, at most once per
  ``REMINDER_RESEND_HOURS``.
"""
from __future__ import annotations

import atexit
import csv
import json
import logging
import os
import smtplib
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from email.message import EmailMessage
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from config import Settings
from database.db_manager import LEASE_POOL_SIZE
from database.models import AuditLog, Reminder, User
from services.chat.chat_service import answer_unanswered, catch_up_turn_upkeep
from services.hosting.runtime import Runtime
from services.operations import admin_service
from services.participants import panel_service
from services.participants.contacts import decrypted_contacts
from services.platform.clock import parse_utc_iso
from services.platform.leases import SchedulerLeadership
from services.study.timer_service import TaskService

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
    resend_hours: float = 24.0  # the lab's digest of overdue codes goes out at most this often
    base_url: str | None = None
    channels: tuple[str, ...] = ("email",)
    webhook_url: str | None = None
    webhook_token: str | None = None
    webhook_timeout: float = 10.0

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
            channels=tuple(c.strip() for c in env.get("REMINDER_CHANNELS", "email").split(",") if c.strip()),
            webhook_url=env.get("REMINDER_WEBHOOK_URL") or None,
            webhook_token=env.get("REMINDER_WEBHOOK_TOKEN") or None,
            webhook_timeout=float(env.get("REMINDER_WEBHOOK_TIMEOUT", "10")),
        )


def _tasks(session: Session, runtime: Runtime) -> TaskService:
    if runtime.studies is not None:  # a process running only jobs sees newly published versions too
        runtime.studies.refresh()
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


def open_tasks(session: Session, runtime: Runtime) -> list[dict[str, Any]]:
    """Every (active participant, task) that is available right now, not yet started: whether it is
    ``overdue`` and whether it is the study's ``first`` task (which opens at consent)."""
    tasks = _tasks(session, runtime)
    found = []
    for user in session.scalars(select(User).where(User.role == "participant", User.status == "active")
                                .order_by(User.id)):
        for task in tasks.overview(user):
            if task["status"] == "available":
                found.append({"user_id": user.id, "participant_code": user.participant_code,
                              "external_id": user.external_id, "language": user.language,
                              "time_zone": user.time_zone, "task_id": task["id"],
                              "title": task["title"], "available_at": task["available_at"],
                              "overdue": bool(task.get("overdue")), "first": task["id"] == tasks.task_ids[0]})
    return found


def overdue_tasks(session: Session, runtime: Runtime) -> list[dict[str, Any]]:
    """Every (active participant, task) that is available but overdue right now."""
    return [entry for entry in open_tasks(session, runtime) if entry["overdue"]]


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
    ("unlocked", "zh"): ("AI Memory Lab：你的下一个任务已经开放",
                         "你好！\n\n研究中的任务“{title}”（{task_id}）已于 {available_at} 开放。"
                         "方便时请完成它。{link}\n\n{opt_out}\n\nAI Memory Lab 研究团队"),
    ("unlocked", "en"): ("AI Memory Lab: your next task is open",
                         "Hello,\n\nthe study task \"{title}\" ({task_id}) opened at {available_at}. Please "
                         "complete it when you can. {link}\n\n{opt_out}\n\nThe AI Memory Lab research team"),
    ("overdue", "zh"): ("AI Memory Lab：你的下一个任务已经开放",
                        "你好！\n\n研究中的任务“{title}”（{task_id}）已于 {available_at} 开放，你还没有开始。"
                        "方便时请完成它。{link}\n\n{opt_out}\n\nAI Memory Lab 研究团队"),
    ("overdue", "en"): ("AI Memory Lab: your next task is open",
                        "Hello,\n\nthe study task \"{title}\" ({task_id}) has been open since {available_at} and "
                        "has not been started yet. Please complete it when you can. {link}\n\n{opt_out}"
                        "\n\nThe AI Memory Lab research team"),
}
# how to stop, in words that fit the channel: an e-mail can be answered, a forwarded SMS or panel message
# may not reach the lab when answered
OPT_OUT_TEXT = {
    ("email", "zh"): "如果你不想再参加研究，回复这封邮件告诉我们即可。",
    ("email", "en"): "If you no longer wish to take part, just reply to this e-mail.",
    ("webhook", "zh"): "如果你不想再参加研究，请告诉研究团队（例如通过招募平台的站内消息）。",
    ("webhook", "en"): "If you no longer wish to take part, let the research team know (for example through "
                       "your panel's messages).",
}
# the link on a line of its own, so mail clients and SMS apps recognise all of it
LINK_TEXT = {"zh": "点击这个个人链接直接进入任务（无需密码）：\n{url}\n",
             "en": "Your personal link opens it directly (no password):\n{url}\n"}
NO_LINK_TEXT = {"zh": "请登录研究网站完成它。", "en": "Please log in to the study site to do it."}
MAX_ATTEMPTS = 3
# An attempt still "sending" after this long was cut off (a send takes seconds; SMTP times out sooner).
STALE_SENDING_SECONDS = 30 * 60
INTERRUPTED = "an earlier attempt was interrupted (the process stopped mid-send); it may have been delivered"


def reminder_text(entry: dict[str, Any], url: str | None, channel: str = "email") -> tuple[str, str]:
    """(subject, body) of one reminder in the participant's language, with the unlock time in their own
    time zone (the one their page reported; UTC until it has) and an opt-out that fits the channel."""
    language = "en" if entry["language"] == "en" else "zh"
    subject, body = REMINDER_TEXT[(entry["kind"], language)]
    link = LINK_TEXT[language].format(url=url) if url else NO_LINK_TEXT[language]
    return subject, body.format(title=entry["title"], task_id=entry["task_id"], link=link,
                                available_at=local_time(entry["available_at"], entry.get("time_zone")),
                                opt_out=OPT_OUT_TEXT[(channel, language)])


def local_time(utc_text: str, time_zone: str | None) -> str:
    """A UTC time from the API ("2026-03-04T09:00:00Z") as wall-clock time in ``time_zone``, zone named."""
    zone = time_zone or "UTC"
    try:
        tz = ZoneInfo(zone)
    except (ZoneInfoNotFoundError, ValueError):
        zone, tz = "UTC", ZoneInfo("UTC")
    moment = parse_utc_iso(utc_text).replace(tzinfo=UTC).astimezone(tz)
    return f"{moment:%Y-%m-%d %H:%M} ({zone})"


def due_reminders(session: Session, runtime: Runtime) -> list[dict[str, Any]]:
    """One (participant, task, kind) per active participant whose next task is open and not started:
    ``overdue`` once it is overdue, else ``unlocked`` (not for the first task, which opens at consent)."""
    return [entry | {"kind": "overdue" if entry["overdue"] else "unlocked"}
            for entry in open_tasks(session, runtime) if entry["overdue"] or not entry["first"]]


def _claim(runtime: Runtime, entry: dict[str, Any], channel: str) -> bool:
    """Record the reminder as being sent, once across processes; False if it was sent (or is being) already.

    A failed reminder is claimed again on a later run, at most MAX_ATTEMPTS times in all; so is one whose
    attempt has been "sending" for STALE_SENDING_SECONDS (the process died mid-send: it may or may not
    have gone out, and a second reminder is a smaller harm than none)."""
    key = dict(user_id=entry["user_id"], task_id=entry["task_id"], kind=entry["kind"], channel=channel)
    now = runtime.clock.now()
    with runtime.db.Session() as session:
        session.add(Reminder(**key, status="sending", attempts=1, created_at=now, claimed_at=now))
        try:
            session.commit()
            return True
        except IntegrityError:
            session.rollback()
        row = session.scalar(select(Reminder).filter_by(**key))
        if row is None:
            return False
        cut_off = row.status == "sending" and _interrupted(row, now)
        if row.attempts >= MAX_ATTEMPTS:
            if cut_off:
                _give_up_interrupted(session, row)
            return False
        if row.status != "failed" and not cut_off:  # sent, or being sent right now
            return False
        claimed = session.execute(update(Reminder).where(Reminder.id == row.id, Reminder.status == row.status,
                                                         Reminder.attempts == row.attempts)
                                  .values(status="sending", attempts=row.attempts + 1, claimed_at=now,
                                          error=INTERRUPTED if cut_off else row.error)).rowcount
        session.commit()
        return claimed == 1


def _interrupted(row: Reminder, now: datetime) -> bool:
    started = row.claimed_at or row.created_at
    return (now - started).total_seconds() >= STALE_SENDING_SECONDS


def _give_up_interrupted(session: Session, row: Reminder) -> None:
    """The last allowed attempt was interrupted: show it as failed on the monitor instead of 'sending'."""
    session.execute(update(Reminder).where(Reminder.id == row.id, Reminder.status == "sending")
                    .values(status="failed", error=INTERRUPTED))
    session.commit()


def _settle(runtime: Runtime, entry: dict[str, Any], channel: str, error: str | None) -> None:
    with runtime.db.session() as session:
        row = session.scalar(select(Reminder).filter_by(user_id=entry["user_id"], task_id=entry["task_id"],
                                                        kind=entry["kind"], channel=channel))
        if row is None:  # the participant was erased while the reminder was being sent
            return
        row.status = "failed" if error else "sent"
        row.error = error[:255] if error else None
        if not error:
            row.sent_at = runtime.clock.now()
            # the address stays out of the audit log; code, task, kind and channel are enough
            session.add(AuditLog(at=row.sent_at, action=REMINDER_ACTION, target_user_id=entry["user_id"],
                                 details={"task_id": entry["task_id"], "kind": entry["kind"], "channel": channel}))


def _return_url(runtime: Runtime, user_id: int, base_url: str | None) -> str | None:
    if not base_url:
        return None
    with runtime.db.session() as session:
        link = panel_service.issue_return_link(session, session.get(User, user_id), _tasks(session, runtime),
                                               purpose="reminder")
    return link.url(base_url)


class EmailChannel:
    """SMTP, one connection per run, opened at the first message."""

    name = "email"

    def __init__(self, config: ReminderConfig, smtp_factory: SmtpFactory) -> None:
        self.config = config
        self.smtp_factory = smtp_factory
        self.smtp: smtplib.SMTP | None = None

    def address(self, entry: dict[str, Any], contacts: dict[tuple[int, str], str], lab_csv: dict[str, str]
                ) -> str | None:
        return contacts.get((entry["user_id"], "email")) or lab_csv.get(entry["participant_code"])

    def send(self, entry: dict[str, Any], address: str | None, url: str | None) -> None:
        subject, body = reminder_text(entry, url, "email")
        message = EmailMessage()
        message["From"] = self.config.sender
        message["To"] = address
        message["Subject"] = subject
        message.set_content(body)
        self._connection().send_message(message)

    def send_raw(self, message: EmailMessage) -> None:
        self._connection().send_message(message)

    def _connection(self) -> smtplib.SMTP:
        if self.smtp is None:
            smtp = self.smtp_factory(self.config.smtp_host, self.config.smtp_port, timeout=30)
            if self.config.starttls:
                smtp.starttls()
            if self.config.smtp_user:
                smtp.login(self.config.smtp_user, self.config.smtp_password or "")
            self.smtp = smtp
        return self.smtp

    def close(self) -> None:
        if self.smtp is not None:
            try:
                self.smtp.quit()
            except smtplib.SMTPException:
                self.smtp.close()
            self.smtp = None


class WebhookChannel:
    """A JSON POST per reminder to the lab's URL, which forwards it by SMS, WeChat or the panel's messages.

    A participant is reached this way through the contact stored for the webhook channel (a phone
    number, a WeChat id) or else their panel id; the payload carries both, the receiver decides."""

    name = "webhook"

    def __init__(self, config: ReminderConfig) -> None:
        self.config = config

    def address(self, entry: dict[str, Any], contacts: dict[tuple[int, str], str], lab_csv: dict[str, str]
                ) -> str | None:
        return contacts.get((entry["user_id"], "webhook")) or entry["external_id"]

    def send(self, entry: dict[str, Any], address: str | None, url: str | None) -> None:
        subject, body = reminder_text(entry, url, "webhook")
        payload = {"event": "task_reminder", "kind": entry["kind"], "participant_code": entry["participant_code"],
                   "external_id": entry["external_id"], "contact": address, "language": entry["language"],
                   "task_id": entry["task_id"], "task_title": entry["title"], "available_at": entry["available_at"],
                   "return_link": url, "subject": subject, "text": body}
        headers = {"Content-Type": "application/json"}
        if self.config.webhook_token:
            headers["Authorization"] = f"Bearer {self.config.webhook_token}"
        request = urllib.request.Request(self.config.webhook_url, data=json.dumps(payload).encode("utf-8"),
                                         headers=headers, method="POST")
        with urllib.request.urlopen(request, timeout=self.config.webhook_timeout) as response:
            if not 200 <= response.status < 300:
                raise OSError(f"webhook answered HTTP {response.status}")

    def close(self) -> None:
        return None


def _channels(config: ReminderConfig, smtp_factory: SmtpFactory) -> list[EmailChannel | WebhookChannel]:
    channels: list[EmailChannel | WebhookChannel] = []
    for name in config.channels:
        if name == "email":
            channels.append(EmailChannel(config, smtp_factory))
        elif name == "webhook":
            if not config.webhook_url:
                raise ValueError("REMINDER_CHANNELS names webhook but REMINDER_WEBHOOK_URL is not set")
            channels.append(WebhookChannel(config))
        else:
            raise ValueError(f"unknown reminder channel {name!r} (email, webhook)")
    return channels


SmtpFactory = Callable[..., smtplib.SMTP]


def send_reminders(runtime: Runtime, config: ReminderConfig | None = None, *,
                   smtp_factory: SmtpFactory = smtplib.SMTP) -> dict[str, Any]:
    """Remind active participants of an unlocked or overdue task, once per task, kind and channel,
    each with a fresh personal return link; then the lab's digest. Off unless enabled."""
    config = config or ReminderConfig.from_env()
    result: dict[str, Any] = {"enabled": config.enabled, "sent": [], "failed": [], "no_contact": [],
                              "digest": False}
    if not config.enabled:
        return result
    channels = _channels(config, smtp_factory)
    lab_csv = load_contacts(config.contacts_path)
    base_url = config.base_url or runtime.settings.public_base_url
    with runtime.db.Session() as session:
        due = due_reminders(session, runtime)
        contacts = decrypted_contacts(session, runtime.settings.contact_encryption_key)
    try:
        for entry in due:
            for channel in channels:
                _remind(runtime, entry, channel, channel.address(entry, contacts, lab_csv), base_url, result)
        _digest(runtime, config, channels, [entry for entry in due if entry["overdue"]], result)
    finally:
        for channel in channels:
            channel.close()
    return result


def _remind(runtime: Runtime, entry: dict[str, Any], channel, address: str | None, base_url: str | None,
            result: dict[str, Any]) -> None:
    outcome = {"participant_code": entry["participant_code"], "task_id": entry["task_id"], "kind": entry["kind"],
               "channel": channel.name}
    if not address:
        result["no_contact"].append(entry["participant_code"])
        return
    if not _claim(runtime, entry, channel.name):
        return
    try:
        channel.send(entry, address, _return_url(runtime, entry["user_id"], base_url))
    except Exception as exc:  # any channel failure is recorded for the monitor; the next run retries
        log.warning("reminder %s %s via %s failed: %s", entry["participant_code"], entry["task_id"], channel.name,
                    exc)
        _settle(runtime, entry, channel.name, f"{type(exc).__name__}: {exc}")
        result["failed"].append(outcome)
        return
    _settle(runtime, entry, channel.name, None)
    result["sent"].append(outcome)


def _digest(runtime: Runtime, config: ReminderConfig, channels, due: list[dict[str, Any]],
            result: dict[str, Any]) -> None:
    """The lab's list of the overdue participant codes ``due``, at most once per REMINDER_RESEND_HOURS."""
    email_channel = next((c for c in channels if isinstance(c, EmailChannel)), None)
    if not config.digest_to or email_channel is None or not due:
        return
    since = runtime.clock.now() - timedelta(hours=config.resend_hours)
    with runtime.db.session() as session:
        if _recent(session, DIGEST_ACTION, since):
            return
        digest = EmailMessage()
        digest["From"] = config.sender
        digest["To"] = config.digest_to
        digest["Subject"] = f"AI Memory Lab: {len(due)} overdue task(s)"
        digest.set_content("Overdue (participant code, task, open since):\n\n" + "\n".join(
            f"{e['participant_code']}  {e['task_id']}  {e['available_at']}" for e in due))
        email_channel.send_raw(digest)
        session.add(AuditLog(at=runtime.clock.now(), action=DIGEST_ACTION, details={"overdue": len(due)}))
        result["digest"] = True


def _recent(session: Session, action: str, since: datetime) -> list[AuditLog]:
    return list(session.scalars(select(AuditLog).where(AuditLog.action == action, AuditLog.at >= since)))


# -- the timer ----------------------------------------------------------------------------------------------


def job_intervals(settings: Settings, environ: dict[str, str] | None = None) -> dict[str, float]:
    """Seconds between runs. Pilot mode shortens the sweep and overdue checks with its short days."""
    env = os.environ if environ is None else environ
    quick = max(1.0, min(60.0, settings.day_seconds / 4)) if settings.pilot_mode else 60.0
    return {
        "consolidation_sweep": float(env.get("SCHEDULER_SWEEP_SECONDS") or quick),
        "mark_overdue": float(env.get("SCHEDULER_OVERDUE_SECONDS") or (quick if settings.pilot_mode else 300.0)),
        "send_reminders": float(env.get("SCHEDULER_REMINDER_SECONDS") or 3600.0),
        "answer_unanswered": float(env.get("SCHEDULER_ANSWER_SECONDS") or min(quick, 15.0)),
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
    exactly one of them run the jobs (services.platform.leases.SchedulerLeadership), and another
    takes over within a lease period when that process dies."""
    from apscheduler.executors.pool import ThreadPoolExecutor
    from apscheduler.schedulers.background import BackgroundScheduler

    # The jobs run on the background pool; the lease is renewed on a connection and a thread of its
    # own, so neither a class starving the requests' pool nor a long job can make it skip a renewal.
    runtime: Runtime = app.extensions["memory_lab"].for_jobs()
    intervals = job_intervals(runtime.settings)
    leadership = SchedulerLeadership(runtime.db.sibling(LEASE_POOL_SIZE, pool_timeout=5.0),
                                     ttl_seconds=lease_seconds(intervals))
    scheduler = BackgroundScheduler(timezone="UTC", job_defaults={
        "coalesce": True, "max_instances": 1, "misfire_grace_time": 300},
        executors={"default": ThreadPoolExecutor(4), "lease": ThreadPoolExecutor(1)})
    scheduler.add_job(leadership.renew, "interval", id="scheduler_lease", seconds=leadership.renew_seconds,
                      executor="lease", misfire_grace_time=None)
    jobs: list[tuple[str, Callable[..., Any], list[Any]]] = [
        ("consolidation_sweep", sweep_consolidation, [runtime]), ("mark_overdue", mark_overdue, [runtime]),
        ("answer_unanswered", answer_unanswered, [runtime])]
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


# ``flask run-jobs`` holds the scheduler lease for at most this long (a crashed run frees it after that).
RUN_JOBS_LEASE_SECONDS = 300.0


def run_jobs_once(runtime: Runtime, *, reminders: bool = False) -> dict[str, Any]:
    """Every job once, in order (the ``flask run-jobs`` command, e.g. from cron), under the scheduler lease:
    when a server's scheduler (or another run) holds it, that process runs the jobs and this run does
    nothing, so the jobs still run in one place at a time (``{"skipped": reason}``)."""
    leadership = SchedulerLeadership(runtime.db, ttl_seconds=RUN_JOBS_LEASE_SECONDS)
    if not leadership.renew():
        return {"skipped": "another process holds the scheduler lease and runs these jobs"}
    try:
        result: dict[str, Any] = {"answered": answer_unanswered(runtime), "sweep": sweep_consolidation(runtime),
                                  "overdue": mark_overdue(runtime)}
        if reminders:
            result["reminders"] = send_reminders(runtime)
        return result
    finally:
        leadership.resign()
