"""Panel participants and personal return links.

A panel (Prolific, Credamo, wjx, a lab's own list) sends participants to
``/enter?<id_parameter>=<id>``. After consent they get an account keyed by that
external id, with no password, assigned like everyone else; the same id later
reaches the same account, never a second one.

A return link logs its holder in and opens their next task. Its token comes
from ``secrets.token_urlsafe`` and only its SHA-256 is stored, so the database
alone cannot be used to log in. A link expires when the study ends for that
participant (the last task's unlock plus ``return_link_grace_days``) and an
admin can revoke every link of a participant and issue a new one.
"""
from __future__ import annotations

import hashlib
import re
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from database.models import AuditLog, ReturnLink, User
from database.participant_lock import hold_participant
from services.account_service import enrol, hash_password
from services.clock import Clock, utc_iso
from services.errors import BadInput, Conflict, NotFound
from services.languages import LANGUAGES
from services.study import Study
from services.timer_service import TaskService

PANEL_USERNAME_PREFIX = "panel:"  # ':' never passes the register form's username rule
LINK_PATH = "/r/"
TOKEN_BYTES = 32


# -- panel entry -----------------------------------------------------------------------------------


def check_external_id(study: Study, raw: object) -> str:
    """The panel id if it matches the study's pattern in full; BadInput otherwise."""
    pattern = study.panel.id_pattern
    if not isinstance(raw, str) or not re.fullmatch(pattern, raw.strip()):
        raise BadInput("this study link carries no valid participant id; please use the link your panel gave you",
                       code="invalid_panel_id")
    external_id = raw.strip()
    if len(PANEL_USERNAME_PREFIX + external_id) > 64:
        raise BadInput("this participant id is too long", code="invalid_panel_id")
    return external_id


def find_panel_user(session: Session, external_id: str) -> User | None:
    return session.scalar(select(User).where(User.external_id == external_id))


def enter_panel(session: Session, *, external_id: object, consent: object, language: object, study: Study,
                clock: Clock, seed: int | None = None, attempts: int = 5) -> tuple[User, bool]:
    """(user, created): the account of this panel id, created and assigned on its first visit. Commits."""
    if consent is not True:
        raise BadInput("consent is required to take part", code="consent_required")
    external_id = check_external_id(study, external_id)
    existing = find_panel_user(session, external_id)
    if existing is not None:
        return existing, False
    lang = language if language in LANGUAGES else study.default_language
    username = PANEL_USERNAME_PREFIX + external_id

    def collided(_exc: IntegrityError) -> User | None:
        # the same id entered twice at once: the other request's account is the one
        existing = find_panel_user(session, external_id)
        if existing is None and session.scalar(select(User.id).where(User.username == username)):
            raise Conflict("this participant id cannot be used here", code="panel_id_taken") from None
        return existing

    return enrol(session, study, clock, seed=seed, attempts=attempts, after_collision=collided,
                 audit_action="panel_entry",
                 fields={"username": username, "external_id": external_id, "language": lang,
                         "password_hash": hash_password(secrets.token_urlsafe(32))})


# -- completion codes --------------------------------------------------------------------------------


def completion_for(study: Study, task_id: str, user: User) -> dict[str, Any] | None:
    """The task's completion code and redirect URL from the study file, for a finished task."""
    entry = study.panel.tasks.get(task_id)
    if entry is None:
        return None
    code = entry.completion_code
    url = entry.redirect_url
    if url:
        url = url.replace("{completion_code}", code or "").replace("{external_id}", user.external_id or "")
    return {"completion_code": code, "redirect_url": url}


# -- return links -------------------------------------------------------------------------------------


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def study_end(user: User, tasks: TaskService) -> datetime:
    """When this participant's study is over: the last task's unlock plus the grace days (study days)."""
    study = tasks.study
    first = tasks.live_session(user.id, tasks.task_ids[0])
    anchor = first.completed_at if first is not None and first.completed_at else (user.consent_at or user.created_at)
    days = max(t.unlock_offset_days for t in study.tasks) + study.panel.return_link_grace_days
    return anchor + timedelta(days=days * tasks.time_scale)


@dataclass
class IssuedLink:
    token: str
    expires_at: datetime

    def url(self, base_url: str) -> str:
        return base_url.rstrip("/") + LINK_PATH + self.token


def issue_return_link(session: Session, user: User, tasks: TaskService, *, purpose: str) -> IssuedLink:
    """A new personal link for ``user`` (flushes; the caller commits)."""
    if user.status != "active":
        raise Conflict("this participant is not active", code=f"participant_{user.status}")
    token = secrets.token_urlsafe(TOKEN_BYTES)
    now = tasks.clock.now()
    expires = study_end(user, tasks)
    session.add(ReturnLink(user_id=user.id, token_hash=token_hash(token), purpose=purpose, created_at=now,
                           expires_at=expires))
    session.flush()
    return IssuedLink(token=token, expires_at=expires)


def redeem(session: Session, token: str, now: datetime) -> User:
    """The active participant a valid, unexpired, unrevoked link belongs to; NotFound otherwise."""
    link = session.scalar(select(ReturnLink).where(ReturnLink.token_hash == token_hash(token or "")))
    if link is None or link.revoked_at is not None or link.expires_at <= now:
        raise NotFound("this link is not valid (any more)", code="invalid_return_link")
    user = session.get(User, link.user_id)
    if user is None or user.status != "active":
        raise NotFound("this link is not valid (any more)", code="invalid_return_link")
    link.last_used_at = now
    return user


def revoke_links(session: Session, user_id: int, now: datetime) -> int:
    """Revoke every live link of a participant; returns how many."""
    hold_participant(session, user_id)  # before the first write (database.participant_lock)
    result = session.execute(update(ReturnLink).where(ReturnLink.user_id == user_id,
                                                      ReturnLink.revoked_at.is_(None))
                             .values(revoked_at=now))
    return result.rowcount or 0


def reissue_link(session: Session, user: User, tasks: TaskService, *, admin: User) -> IssuedLink:
    """Admin: revoke the participant's links and issue a new one (audited; the caller commits)."""
    now = tasks.clock.now()
    revoked = revoke_links(session, user.id, now)
    link = issue_return_link(session, user, tasks, purpose="admin")
    session.add(AuditLog(at=now, actor_user_id=admin.id, action="return_link_reissued", target_user_id=user.id,
                         details={"revoked": revoked, "expires_at": utc_iso(link.expires_at)}))
    return link


def revoke_all(session: Session, user: User, *, admin: User, now: datetime) -> int:
    revoked = revoke_links(session, user.id, now)
    session.add(AuditLog(at=now, actor_user_id=admin.id, action="return_links_revoked", target_user_id=user.id,
                         details={"revoked": revoked}))
    return revoked


def link_summary(session: Session, user_id: int, now: datetime) -> dict[str, Any]:
    """What the admin record shows about a participant's links (never a token)."""
    links = session.scalars(select(ReturnLink).where(ReturnLink.user_id == user_id).order_by(ReturnLink.id)).all()
    live = [link for link in links if link.revoked_at is None and link.expires_at > now]
    used = [link.last_used_at for link in links if link.last_used_at]
    return {"issued": len(links), "live": len(live), "last_used_at": utc_iso(max(used)) if used else None,
            "expires_at": utc_iso(max(link.expires_at for link in live)) if live else None}


# -- where a link leads ---------------------------------------------------------------------------------


def next_task(tasks: TaskService, user: User) -> dict[str, Any] | None:
    """The first task not done yet, with its status and unlock time; None when all are done."""
    for task in tasks.overview(user):
        if task["status"] != "done":
            return {"id": task["id"], "title": task["title"], "status": task["status"],
                    "available_at": task["available_at"]}
    return None


def landing_path(tasks: TaskService, user: User) -> str:
    task = next_task(tasks, user)
    if task and task["status"] in ("available", "in_progress"):
        return f"/#/task/{task['id']}"
    return "/#/tasks"


def calendar_file(*, study_name: str, task: dict[str, Any], url: str, unlock_at: datetime,
                  language: str, now: datetime) -> bytes:
    """An .ics event at the next task's unlock time, with the return link (icalendar writes RFC 5545)."""
    from icalendar import Calendar, Event

    calendar = Calendar()
    calendar.add("prodid", "-//AI Memory Lab//return link//EN")
    calendar.add("version", "2.0")
    event = Event()
    title = f"{study_name}: {task['id']} {task['title']}"
    event.add("uid", f"{secrets.token_hex(8)}@ai-memory-lab")
    event.add("dtstamp", now.replace(tzinfo=UTC))
    event.add("dtstart", unlock_at.replace(tzinfo=UTC))
    event.add("dtend", (unlock_at + timedelta(minutes=30)).replace(tzinfo=UTC))
    event.add("summary", title)
    note = "任务开放后，打开这个链接继续：" if language == "zh" else "When the task opens, continue with this link: "
    event.add("description", note + url)
    event.add("url", url)
    calendar.add_component(event)
    return calendar.to_ical()

