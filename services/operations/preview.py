"""Seeing the study as a participant would (issue 29 §2): admins' previews, demo links, test participants.

- A **preview** account (role ``preview``) is an admin looking at a task as a participant of a chosen
  condition and language. Its condition is set, not drawn: it takes no assignment slot (its assignments row
  sits outside the blocks, block -1), and every count, the monitor, the export, payments and plots read
  participants only, so it appears in none of them. Its memory builds as for a participant (its chats are
  consolidated by the same code), so a later task shows what that condition remembers; every task opens at
  once (services.study.timer_service). It is deleted with everything it wrote by the console's button or
  ``PREVIEW_HOURS`` after it was made (``delete_previews``, run on every preview request and listing).
- A **demo link** (``/demo/<token>``) is a shareable link for one condition, for an ethics board or co-authors:
  each opening makes a fresh preview account. Revocable, with an expiry; only its token's hash is stored.
- A **test participant** (role ``test``) is a pilot participant an admin forces into a group: counted apart
  in the monitor, left out of exports unless ``include_test=1``, never in the assignment counts.
"""
from __future__ import annotations

import secrets
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import delete, func, select, update
from sqlalchemy.orm import Session

from database.models import Assignment, AuditLog, Base, DemoLink, ReturnLink, User
from services.participants.account_service import new_participant_code
from services.participants.consent import record_consent
from services.participants.panel_service import IssuedLink, token_hash
from services.platform.clock import utc_iso
from services.platform.errors import BadInput, NotFound
from services.study.definition import Study
from services.text.languages import LANGUAGES

PREVIEW_HOURS = 24.0  # a preview account and its data are deleted this long after it was made
DEMO_DAYS_DEFAULT = 14.0
DEMO_DAYS_MAX = 365.0
TOKEN_BYTES = 24
NO_PASSWORD = "!no-password"  # not a werkzeug hash: no password ever matches it


def _choice(name: str, value: Any, allowed: list[str]) -> str:
    if value not in allowed:
        raise BadInput(f"{name} must be one of {', '.join(allowed)}", code=f"invalid_{name}",
                       details={name: value, "allowed": allowed})
    return value


def _account(session: Session, study: Study, *, role: str, condition: str, language: str, now: datetime,
             username: str | None = None) -> User:
    """An account whose condition is set, outside the assignment blocks (no slot is taken)."""
    name = username or f"{role}-{secrets.token_hex(5)}"
    user = User(username=name, password_hash=NO_PASSWORD, role=role, language=language, created_at=now,
                consent_at=now, consent_version=study.consent.version, status="active",
                study_version=study.version,
                participant_code=new_participant_code(session) if role == "test" else None)
    session.add(user)
    session.flush()
    record_consent(session, user, study, now)
    # block -1 and a negative slot: unique, and never among the permuted blocks' slots
    session.add(Assignment(user_id=user.id, memory_group=condition, block_index=-1, slot_index=-user.id,
                           block_sequence=[condition], seed=None, created_at=now))
    session.flush()
    return user


def _link(session: Session, user: User, *, purpose: str, now: datetime, expires: datetime) -> IssuedLink:
    token = secrets.token_urlsafe(TOKEN_BYTES)
    session.add(ReturnLink(user_id=user.id, token_hash=token_hash(token), purpose=purpose, created_at=now,
                           expires_at=expires))
    session.flush()
    return IssuedLink(token=token, expires_at=expires)


def create_preview(session: Session, study: Study, *, condition: Any, task: Any, language: Any, actor: User | None,
                   now: datetime, hours: float = PREVIEW_HOURS) -> tuple[User, IssuedLink]:
    """A preview account for ``condition`` and ``language`` and a link opening ``task`` (the caller commits)."""
    condition = _choice("condition", condition, sorted(study.conditions))
    task = _choice("task", task, study.task_ids)
    language = _choice("language", language, list(LANGUAGES))
    delete_previews(session, now=now, older_than=timedelta(hours=hours))
    user = _account(session, study, role="preview", condition=condition, language=language, now=now)
    link = _link(session, user, purpose="preview", now=now, expires=now + timedelta(hours=hours))
    session.add(AuditLog(at=now, actor_user_id=actor.id if actor else None, action="preview_created",
                         target_user_id=user.id, details={"condition": condition, "task": task,
                                                          "language": language}))
    return user, link


def delete_previews(session: Session, *, now: datetime, older_than: timedelta | None = None) -> int:
    """Delete preview accounts (those made longer than ``older_than`` ago; all without it) with every row they
    own, over the tables the models declare; the audit log keeps its entries without the account."""
    query = select(User.id).where(User.role == "preview")
    if older_than is not None:
        query = query.where(User.created_at <= now - older_than)
    ids = list(session.scalars(query))
    if not ids:
        return 0
    session.execute(update(AuditLog).where(AuditLog.target_user_id.in_(ids)).values(target_user_id=None))
    session.execute(update(AuditLog).where(AuditLog.actor_user_id.in_(ids)).values(actor_user_id=None))
    for table in reversed(Base.metadata.sorted_tables):
        if table.name != "users" and "user_id" in table.c:
            if table.name == "messages":  # replies first: they point at the participant's messages
                session.execute(delete(table).where(table.c.user_id.in_(ids), table.c.reply_to_id.is_not(None)))
            session.execute(delete(table).where(table.c.user_id.in_(ids)))
    session.execute(delete(User).where(User.id.in_(ids)))
    return len(ids)


def preview_listing(session: Session, now: datetime) -> list[dict[str, Any]]:
    rows = session.execute(select(User, Assignment.memory_group).join(Assignment, Assignment.user_id == User.id)
                           .where(User.role == "preview").order_by(User.id)).all()
    return [{"id": u.id, "condition": group, "language": u.language, "created_at": utc_iso(u.created_at),
             "deleted_after": utc_iso(u.created_at + timedelta(hours=PREVIEW_HOURS))} for u, group in rows]


# -- demo links -------------------------------------------------------------------------------------------------


def create_demo_link(session: Session, study: Study, *, condition: Any, language: Any, days: Any, label: Any,
                     actor: User | None, now: datetime) -> tuple[DemoLink, str]:
    condition = _choice("condition", condition, sorted(study.conditions))
    language = _choice("language", language, list(LANGUAGES))
    days = DEMO_DAYS_DEFAULT if days is None else days
    if isinstance(days, bool) or not isinstance(days, int | float) or not 0 < days <= DEMO_DAYS_MAX:
        raise BadInput(f"days must be a number above 0 and at most {DEMO_DAYS_MAX:g}", code="invalid_days")
    if label is not None and (not isinstance(label, str) or len(label) > 200):
        raise BadInput("label must be text of at most 200 characters", code="invalid_label")
    token = secrets.token_urlsafe(TOKEN_BYTES)
    link = DemoLink(token_hash=token_hash(token), condition=condition, language=language, label=label,
                    created_at=now, created_by=actor.id if actor else None,
                    expires_at=now + timedelta(days=float(days)), opened=0)
    session.add(link)
    session.flush()
    session.add(AuditLog(at=now, actor_user_id=actor.id if actor else None, action="demo_link_created",
                         details={"demo_link_id": link.id, "condition": condition, "language": language,
                                  "expires_at": utc_iso(link.expires_at)}))
    return link, token


def revoke_demo_link(session: Session, link_id: int, *, actor: User, now: datetime) -> DemoLink:
    link = session.get(DemoLink, link_id)
    if link is None:
        raise NotFound("no such demo link", code="unknown_demo_link")
    if link.revoked_at is None:
        link.revoked_at = now
        session.add(AuditLog(at=now, actor_user_id=actor.id, action="demo_link_revoked",
                             details={"demo_link_id": link.id}))
    return link


def open_demo_link(session: Session, study: Study, token: str, *, now: datetime) -> User:
    """A fresh preview account for a valid demo link (the caller commits and logs it in); NotFound otherwise."""
    link = session.scalar(select(DemoLink).where(DemoLink.token_hash == token_hash(token or "")))
    if link is None or link.revoked_at is not None or link.expires_at <= now or link.condition not in study.conditions:
        raise NotFound("this demo link is not valid (any more)", code="invalid_demo_link")
    delete_previews(session, now=now, older_than=timedelta(hours=PREVIEW_HOURS))
    link.opened = (link.opened or 0) + 1
    user = _account(session, study, role="preview", condition=link.condition, language=link.language, now=now)
    session.add(AuditLog(at=now, action="demo_link_opened", target_user_id=user.id,
                         details={"demo_link_id": link.id, "condition": link.condition}))
    return user


def demo_link_view(link: DemoLink, now: datetime) -> dict[str, Any]:
    state = "revoked" if link.revoked_at else "expired" if link.expires_at <= now else "live"
    return {"id": link.id, "condition": link.condition, "language": link.language, "label": link.label,
            "created_at": utc_iso(link.created_at), "expires_at": utc_iso(link.expires_at),
            "revoked_at": utc_iso(link.revoked_at), "opened": link.opened, "state": state}


def demo_links(session: Session, now: datetime) -> list[dict[str, Any]]:
    return [demo_link_view(link, now) for link in session.scalars(select(DemoLink).order_by(DemoLink.id.desc()))]


# -- test participants ------------------------------------------------------------------------------------------


def create_test_participant(session: Session, study: Study, *, condition: Any, language: Any, actor: User,
                            now: datetime, expires: datetime) -> tuple[User, IssuedLink]:
    """A pilot participant forced into ``condition`` with a personal login link (the caller commits)."""
    condition = _choice("condition", condition, sorted(study.conditions))
    language = _choice("language", language, list(LANGUAGES))
    user = _account(session, study, role="test", condition=condition, language=language, now=now)
    link = _link(session, user, purpose="test", now=now, expires=expires)
    session.add(AuditLog(at=now, actor_user_id=actor.id, action="test_participant_created", target_user_id=user.id,
                         details={"condition": condition, "language": language}))
    return user, link


def test_counts(session: Session) -> dict[str, int]:
    """Test participants per condition, counted apart from the study's participants."""
    rows = session.execute(select(Assignment.memory_group, func.count()).join(User, User.id == Assignment.user_id)
                           .where(User.role == "test").group_by(Assignment.memory_group))
    return {group: count for group, count in rows}
