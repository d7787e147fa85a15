"""Erasure on request: everything a participant wrote or that was derived from it goes; a tombstone stays.

Separate from withdrawal (which keeps every record). Erasure deletes every row
that belongs to the participant by ``user_id`` - messages, replies and their
memory contexts and prompts, task sessions, questionnaire answers (attention
checks included), profiles and summaries, recall events, consolidation runs,
provider failures, return links, contact details and reminders - in one
transaction, in foreign-key order. It works over the tables the models declare,
so a table added later with a ``user_id`` is erased too.

What stays is the tombstone: the ``users`` row reduced to the pseudonymous code,
enrolment (consent) time, erasure time and reason, the ``assignments`` row
(group, block and slot, so balance statistics and the next draws stay right)
and the audit log. It cannot be undone.
"""
from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import delete, select, update
from sqlalchemy.orm import Session

from database.models import AuditLog, Base, Message, ProviderFailure, User, username_key
from services.clock import utc_iso
from services.errors import BadInput, Conflict, NotFound
from services.memory.hybrid import ForgettingCurveSearch

# the tombstone and the audit trail
KEPT_TABLES = frozenset({"users", "assignments", "audit_log"})
ERASED_PASSWORD = "!erased"  # not a werkzeug hash: no password ever matches it
MAX_REASON = 2000


def _reason(raw: Any) -> str:
    if not isinstance(raw, str) or not raw.strip():
        raise BadInput("a reason is required to erase a participant", code="reason_required")
    if len(raw) > MAX_REASON:
        raise BadInput(f"the reason is longer than {MAX_REASON} characters", code="reason_too_long")
    return raw.strip()


def erase_participant(session: Session, user_id: int, *, admin: User, confirm: Any, reason: Any,
                      now: datetime) -> dict[str, Any]:
    """Erase a participant, keep the tombstone, audit it. The caller commits. Returns the tombstone."""
    if confirm is not True:
        raise BadInput("erasure cannot be undone: send confirm: true", code="confirmation_required")
    text = _reason(reason)
    user = session.get(User, user_id)
    if user is None or user.role != "participant":
        raise NotFound("no such participant", code="unknown_participant")
    if user.status == "erased":
        raise Conflict("this participant has already been erased", code="already_erased")
    deleted = _delete_rows(session, user.id)
    user.username = _erased_name(session, user)
    user.password_hash = ERASED_PASSWORD
    user.external_id = None
    user.withdrawn_reason = None
    user.last_active_at = None
    user.session_version = (user.session_version or 0) + 1  # ends every session of this account
    user.status = "erased"
    user.erased_at = now
    user.erasure_reason = text
    session.add(AuditLog(at=now, actor_user_id=admin.id, action="participant_erased", target_user_id=user.id,
                         details={"participant_code": user.participant_code, "memory_group": user.memory_group,
                                  "reason": text, "deleted_rows": deleted}))
    session.flush()
    # this process's recall cache holds the participant's texts; other processes drop theirs once idle
    # (ForgettingCurveSearch.cache_idle_seconds), and a recall for an erased participant cannot happen
    ForgettingCurveSearch.invalidate(user.id)
    return tombstone(user)


def _erased_name(session: Session, user: User) -> str:
    """``erased-<code>``; should an older account hold that name (registered before the prefix was
    reserved), ``erased:<code>``, which no registration can take (':' is not allowed in a username)."""
    name = f"erased-{user.participant_code}"
    taken = session.scalar(select(User.id).where(User.username_key == username_key(name), User.id != user.id))
    return name if taken is None else f"erased:{user.participant_code}"


def _delete_rows(session: Session, user_id: int) -> dict[str, int]:
    # another participant's failure row may point at one of these messages: keep the row, drop the pointer
    own_messages = select(Message.id).where(Message.user_id == user_id).scalar_subquery()
    session.execute(update(ProviderFailure).where(ProviderFailure.message_id.in_(own_messages))
                    .values(message_id=None))
    deleted: dict[str, int] = {}
    for table in reversed(Base.metadata.sorted_tables):  # dependants before what they point at
        if table.name in KEPT_TABLES or "user_id" not in table.c:
            continue
        count = session.execute(delete(table).where(table.c.user_id == user_id)).rowcount or 0
        if count:
            deleted[table.name] = count
    return deleted


def tombstone(user: User) -> dict[str, Any]:
    """All that is left of an erased participant."""
    assignment = user.assignment
    return {
        "id": user.id,
        "participant_code": user.participant_code,
        "status": user.status,
        "memory_group": assignment.memory_group if assignment else None,
        "assignment_block": assignment.block_index if assignment else None,
        "assignment_slot": assignment.slot_index if assignment else None,
        "enrolled_at": utc_iso(user.consent_at or user.created_at),
        "erased_at": utc_iso(user.erased_at),
        "erasure_reason": user.erasure_reason,
    }

