"""Reminder e-mails and webhook messages (off unless ``REMINDERS_ENABLED=1``; the scheduler runs ``send_reminders``).

Each active participant is reminded when their next task unlocks and again when it is overdue, once per task,
kind and channel (table ``reminders``: sent or failed, shown in the monitor; a failure is retried on later runs,
three attempts in all). Each reminder carries a fresh personal return link. Channels (``REMINDER_CHANNELS``):
``email`` by SMTP, to the address the participant gave (stored encrypted, services.participants.contacts) or
the lab's ``participant_code,email`` CSV named by ``REMINDER_CONTACTS``; ``webhook``, a JSON POST to
``REMINDER_WEBHOOK_URL`` that the lab forwards by SMS, WeChat or the panel's messages. Withdrawn and erased
participants are never contacted. ``REMINDER_DIGEST_TO`` additionally sends the lab a list of overdue
participant codes, at most once per ``REMINDER_RESEND_HOURS``.
"""
from __future__ import annotations

import csv
import json
import logging
import smtplib
import urllib.request
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from email.message import EmailMessage
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from database.models import AuditLog, Reminder, User
from services.hosting.runtime import Runtime
from services.operations.overdue import open_tasks, task_service
from services.participants import panel_service
from services.participants.contacts import decrypted_contacts
from services.platform.clock import parse_utc_iso
from services.study.settings import ReminderConfig
from services.text.catalogs import CATALOGS
from services.text.languages import DEFAULT_LANGUAGE

log = logging.getLogger(__name__)

REMINDER_ACTION = "reminder_sent"
DIGEST_ACTION = "overdue_digest_sent"


def load_contacts(path: str | None) -> dict[str, str]:
    """participant_code -> e-mail from the lab's contacts CSV (header: participant_code,email)."""
    if not path:
        return {}
    with Path(path).open(encoding="utf-8-sig", newline="") as handle:
        return {row["participant_code"].strip(): row["email"].strip()
                for row in csv.DictReader(handle) if row.get("participant_code") and row.get("email")}


# The words are the catalogs' reminder.* (translations/): reminder.<kind>.subject/body, an opt-out that fits the
# channel (reminder.opt_out.<channel>: an e-mail can be answered, a forwarded SMS or panel message may not reach
# the lab when answered) and the personal link on a line of its own (reminder.link), so mail clients and SMS apps
# recognise all of it.
MAX_ATTEMPTS = 3
# An attempt still "sending" after this long was cut off (a send takes seconds; SMTP times out sooner).
STALE_SENDING_SECONDS = 30 * 60
INTERRUPTED = "an earlier attempt was interrupted (the process stopped mid-send); it may have been delivered"


def reminder_text(entry: dict[str, Any], url: str | None, channel: str = "email") -> tuple[str, str]:
    """(subject, body) of one reminder in the participant's language, with the unlock time in their own
    time zone (the one their page reported; UTC until it has) and an opt-out that fits the channel."""
    language = entry["language"] if CATALOGS.has(entry["language"]) else DEFAULT_LANGUAGE
    link = CATALOGS.text(language, "reminder.link", url=url) if url else CATALOGS.text(language, "reminder.no_link")
    body = CATALOGS.text(language, f"reminder.{entry['kind']}.body", title=entry["title"], task_id=entry["task_id"],
                         link=link, available_at=local_time(entry["available_at"], entry.get("time_zone")),
                         opt_out=CATALOGS.text(language, f"reminder.opt_out.{channel}"))
    return CATALOGS.text(language, f"reminder.{entry['kind']}.subject"), body


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
        link = panel_service.issue_return_link(session, session.get(User, user_id), task_service(session, runtime),
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
    each with a fresh personal return link; then the lab's digest. Off unless enabled (``config``, else
    the runtime's settings)."""
    config = config or runtime.settings.reminders
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

