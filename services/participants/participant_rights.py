"""What the consent promises a participant, from their own side: withdrawing (with erasure when the
study's consent offers it) and the debrief.

Withdrawal keeps every record, like an admin's; "withdraw and erase" then hands the account to
``erasure_service.erase_participant``, the one erasure path, which ends every session of the account.
The debrief explains the memory manipulation. It is shown only after the last task or after
withdrawal, because its per-condition paragraph names the participant's memory condition and its
general text would tell anyone still taking part what the study manipulates.
"""
from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy.orm import Session

from database.models import AuditLog, User
from database.participant_lock import lock_for_erasure
from services.participants.erasure_service import erase_participant
from services.platform.clock import utc_iso
from services.platform.errors import BadInput, Conflict, Forbidden, Gone
from services.study.definition import Study
from services.study.timer_service import TaskService, localised

ERASURE_REASON = "withdrew and asked for erasure (the participant's own request)"


def withdraw_self(session: Session, tasks: TaskService, user: User, *, confirm: Any, erase: Any,
                  now: datetime, secret: str) -> dict[str, Any]:
    """The participant withdraws (``erase``: and has their data erased). Audited; the caller commits.

    Returns ``{"withdrawn_at", "erased", "debrief"}``; the debrief is taken before anything is erased."""
    if confirm is not True:
        raise BadInput("withdrawing cannot be undone: send confirm: true", code="confirmation_required")
    if not isinstance(erase, bool):
        raise BadInput("erase must be true or false", code="invalid_erase")
    if erase and not tasks.study.consent.erasure_on_withdrawal:
        raise Forbidden("this study's consent does not offer erasure on withdrawal; please contact the lab",
                        code="erasure_not_offered")
    # the participant's row exclusively, then their status as it stands under that lock (as erasure reads
    # it): an erasure that ran meanwhile is seen here, never overwritten by a stale "withdrawn"
    status = lock_for_erasure(session.connection(), user.id)
    session.refresh(user)
    if status == "erased":
        raise Gone("this participant's data has been erased", code="participant_erased")
    if user.status == "withdrawn" and not erase:
        raise Conflict("you have already withdrawn from this study", code="already_withdrawn")
    if user.status == "active":
        user.status = "withdrawn"
        user.withdrawn_at = now
        user.withdrawn_by = "participant"
        session.add(AuditLog(at=now, actor_user_id=user.id, action="participant_withdrawn", target_user_id=user.id,
                             details={"by": "participant", "erase": erase,
                                      "participant_code": user.participant_code}))
    debrief = debrief_text(tasks.study, user, user.language)
    withdrawn_at = utc_iso(user.withdrawn_at)
    if erase:
        erase_participant(session, user.id, admin=user, confirm=True, reason=ERASURE_REASON, now=now,
                          secret=secret)
    return {"withdrawn_at": withdrawn_at, "erased": erase, "debrief": debrief}


def debrief_for(tasks: TaskService, user: User) -> dict[str, Any]:
    """The debrief, once the participant has done every task or withdrawn; refused before that."""
    if user.status == "active" and any(t["status"] != "done" for t in tasks.overview(user)):
        raise Forbidden("the debriefing is shown after the last task", code="debrief_not_yet")
    return debrief_text(tasks.study, user, user.language)


def debrief_text(study: Study, user: User, language: str) -> dict[str, Any]:
    """Title, text and (when the study file has one for the participant's condition) the paragraph about it."""
    debrief = study.debrief
    group = debrief.by_condition.get(user.memory_group or "")
    return {"title": localised(debrief.title, language), "text": localised(debrief.text, language),
            "your_assistant": localised(group, language) if group else None,
            "contact": localised(study.consent.contact, language) if study.consent.contact else None}
