"""Erasure on request: everything a participant wrote or that was derived from it goes; a tombstone stays.

Separate from withdrawal (which keeps every record). Erasure deletes every row
that belongs to the participant by ``user_id`` - messages, replies and their
memory contexts and prompts, task sessions, questionnaire answers (attention
checks included), profiles and summaries, recall events, consolidation runs,
provider failures, return links, contact details and reminders - in one
transaction, in foreign-key order. It works over the tables the models declare,
so a table added later with a ``user_id`` is erased too.

It happens once, and apart from the participant's own activity: it holds the
participant lease (``services.platform.leases``: their memory upkeep is not running) and,
inside its transaction, the participant's ``users`` row exclusively
(``database.participant_lock``): it waits for their writes under way, deletes what
they wrote, and a write arriving after it is refused (410), as is a second erasure
(409). After the commit it clears what lies outside those rows: the rate-limit
counters keyed by the participant's name or account, this process's recall cache,
and the copies of the deleted rows the database still holds (SQLite's write-ahead
log is checkpointed and truncated; PostgreSQL's tables are vacuumed).

What stays is the tombstone: the ``users`` row reduced to the pseudonymous code,
enrolment (consent) time, erasure time and reason, keyed hashes of the panel id and
username (``services.participants.tombstone``: that id or name cannot enter again as a
new participant who has read the debrief; neither is kept in clear), the ``assignments`` row
(group, block and slot, so balance statistics and the next draws stay right)
and the audit log. It cannot be undone.
"""
from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import delete, event, select, text, update
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from database import rate_limit_store
from database.db_manager import Database
from database.models import AuditLog, Base, Message, ProviderFailure, User, username_key
from database.participant_lock import TOMBSTONE_TABLES, lock_for_erasure
from services.memory.hybrid import ForgettingCurveSearch
from services.participants.tombstone import tombstone_hash
from services.platform.clock import utc_iso
from services.platform.errors import BadInput, Conflict, NotFound, Unavailable
from services.platform.leases import LeaseBusy, participant_guard

log = logging.getLogger(__name__)

# the tombstone and the audit trail
KEPT_TABLES = TOMBSTONE_TABLES
ERASED_PASSWORD = "!erased"  # not a werkzeug hash: no password ever matches it
MAX_REASON = 2000
# how long an erasure waits for the participant's memory upkeep (one model call, usually seconds)
LEASE_WAIT_SECONDS = 30.0


@dataclass(frozen=True)
class _Erased:
    user_id: int
    username: str
    tables: tuple[str, ...]  # where rows were deleted or changed
    tombstone: dict[str, Any]


def _reason(raw: Any) -> str:
    if not isinstance(raw, str) or not raw.strip():
        raise BadInput("a reason is required to erase a participant", code="reason_required")
    if len(raw) > MAX_REASON:
        raise BadInput(f"the reason is longer than {MAX_REASON} characters", code="reason_too_long")
    return raw.strip()


def erase(db: Database, user_id: int, *, admin: User, confirm: Any, reason: Any, now: datetime,
          secret: str) -> dict[str, Any]:
    """``erase_participant`` in its own transaction, holding the participant lease (their memory upkeep is
    not running); commits. 503 ``participant_busy`` when the upkeep held the lease ``LEASE_WAIT_SECONDS``."""
    try:
        with participant_guard(db, user_id, wait_seconds=LEASE_WAIT_SECONDS), db.session() as session:
            return erase_participant(session, user_id, admin=admin, confirm=confirm, reason=reason, now=now,
                                     secret=secret)
    except LeaseBusy as exc:
        raise Unavailable("this participant's memory is being updated right now; please try again in a minute",
                          code="participant_busy") from exc


def erase_participant(session: Session, user_id: int, *, admin: User, confirm: Any, reason: Any,
                      now: datetime, secret: str) -> dict[str, Any]:
    """Erase a participant, keep the tombstone, audit it (``admin`` did it: an admin, or the participant
    themself). The caller commits; once it has, what lies outside the rows is cleared (``_clear_traces``).
    Returns the tombstone. 409 ``already_erased`` when they are, also for every erasure that ran at the
    same time as the one that did it."""
    if confirm is not True:
        raise BadInput("erasure cannot be undone: send confirm: true", code="confirmation_required")
    erased = _erase(session, user_id, actor_id=admin.id, reason=_reason(reason), now=now, secret=secret)
    _once_committed(session, lambda: _clear_traces(session.get_bind(), erased))
    return erased.tombstone


def _once_committed(session: Session, action: Callable[[], None]) -> None:
    """Run ``action`` after the session's transaction commits; never if it rolls back."""
    state = {"pending": True}

    def committed(_session: Session) -> None:
        if state["pending"]:
            state["pending"] = False
            action()

    def rolled_back(_session: Session) -> None:
        state["pending"] = False

    event.listen(session, "after_commit", committed)
    event.listen(session, "after_rollback", rolled_back)


def _erase(session: Session, user_id: int, *, actor_id: int, reason: str, now: datetime, secret: str) -> _Erased:
    session.flush()  # the caller's pending changes (a withdrawal) are kept, not overwritten by the re-read below
    # waits for the participant's writes under way; the status is read again under the lock
    status = lock_for_erasure(session.connection(), user_id)
    user = session.get(User, user_id, populate_existing=True)
    if user is None or user.role != "participant":
        raise NotFound("no such participant", code="unknown_participant")
    if status == "erased":
        raise Conflict("this participant has already been erased", code="already_erased")
    username = user.username
    deleted = _delete_rows(session, user.id)
    # keyed hashes only (services.participants.tombstone): the id and name are refused later, not kept
    user.erased_id_hash = tombstone_hash(secret, "panel_id", user.external_id) if user.external_id else None
    user.erased_name_hash = tombstone_hash(secret, "username", user.username)
    user.username = _erased_name(session, user)
    user.password_hash = ERASED_PASSWORD
    user.external_id = None
    user.withdrawn_reason = None
    user.last_active_at = None
    user.session_version = (user.session_version or 0) + 1  # ends every session of this account
    user.status = "erased"
    user.erased_at = now
    user.erasure_reason = reason
    session.add(AuditLog(at=now, actor_user_id=actor_id, action="participant_erased", target_user_id=user.id,
                         details={"participant_code": user.participant_code, "memory_group": user.memory_group,
                                  "reason": reason, "deleted_rows": deleted}))
    session.flush()
    return _Erased(user_id=user.id, username=username, tables=tuple(deleted) + ("users", "provider_failures"),
                   tombstone=tombstone(user))


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


def _clear_traces(engine: Engine, erased: _Erased) -> None:
    """After the commit: what the deleted rows leave outside themselves. Each step is logged if it fails;
    the erasure itself stands."""
    # this process's recall cache held the participant's texts; other processes drop theirs once idle
    # (ForgettingCurveSearch.cache_idle_seconds), and a recall for an erased participant cannot happen
    ForgettingCurveSearch.invalidate(erased.user_id)
    try:
        rate_limit_store.forget_account(engine, user_id=erased.user_id, username=erased.username)
    except Exception:
        log.exception("rate-limit counters of erased participant %s not removed", erased.user_id)
    try:
        _drop_old_copies(engine, [*erased.tables, "rate_limit_counters"])
    except Exception:
        log.exception("the database may still hold copies of erased participant %s's rows", erased.user_id)


def _drop_old_copies(engine: Engine, tables: list[str]) -> None:
    """SQLite writes every change to its write-ahead log first, and keeps it there until a checkpoint: copy
    it into the file (where secure_delete has zeroed the deleted rows) and truncate the log. PostgreSQL
    keeps deleted rows as dead tuples until a vacuum: vacuum the tables now rather than when autovacuum
    gets to them. (Neither reaches backups, or PostgreSQL's own write-ahead log: see README, Erasure.)"""
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        if engine.dialect.name == "sqlite":
            busy, log_frames, copied = conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)").one()
            if busy:
                log.warning("SQLite checkpoint after an erasure was blocked (%s of %s log frames copied); "
                            "the next checkpoint copies the rest", copied, log_frames)
            return
        quote = engine.dialect.identifier_preparer.quote
        conn.execute(text("VACUUM " + ", ".join(quote(name) for name in sorted(set(tables)))))


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
