"""What admins see: one monitor row per participant, and a participant's whole record."""
from __future__ import annotations

from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from database.models import (
    ConsolidationRun,
    Message,
    ProfileVersion,
    ProviderFailure,
    QuestionnaireResponse,
    RecallEvent,
    User,
)
from services.chat_service import serialise_message
from services.errors import NotFound
from services.timer_service import TaskService


def _iso(value) -> str | None:
    return value.isoformat(timespec="seconds") + "Z" if value else None


def _counts(session: Session, model, column) -> dict[int, int]:
    return dict(session.execute(select(column, func.count()).select_from(model).group_by(column)).all())


def monitor_rows(session: Session, tasks: TaskService) -> list[dict[str, Any]]:
    participants = session.scalars(select(User).where(User.role == "participant").order_by(User.id)).all()
    messages = _counts(session, Message, Message.user_id)
    failures = _counts(session, ProviderFailure, ProviderFailure.user_id)
    questionnaires = dict(session.execute(
        select(QuestionnaireResponse.user_id, func.count(func.distinct(QuestionnaireResponse.task_session_id)))
        .group_by(QuestionnaireResponse.user_id)).all())
    rows = []
    for user in participants:
        overview = tasks.overview(user)
        sessions = tasks.sessions_of(user.id)
        consolidation = [s.consolidation_status for s in sessions if s.status != "reset"]
        rows.append({
            "id": user.id,
            "participant_code": user.participant_code,
            "username": user.username,
            "memory_group": user.memory_group,
            "status": user.status,
            "enrolled_at": _iso(user.consent_at or user.created_at),
            "last_active_at": _iso(user.last_active_at),
            "tasks": {t["id"]: t["status"] for t in overview},
            "task_details": overview,
            "overdue": any(t.get("overdue") for t in overview),
            "messages": messages.get(user.id, 0),
            "questionnaires_done": questionnaires.get(user.id, 0),
            "consolidation": {s.task_id: s.consolidation_status for s in sessions if s.status != "reset"},
            "consolidation_pending": sum(1 for c in consolidation if c in ("pending", "failed")),
            "provider_failures": failures.get(user.id, 0),
        })
    return rows


def participant_record(session: Session, tasks: TaskService, user_id: int) -> dict[str, Any]:
    user = session.get(User, user_id)
    if user is None or user.role != "participant":
        raise NotFound("no such participant", code="unknown_participant")
    row = next(r for r in monitor_rows(session, tasks) if r["id"] == user_id)
    sessions = tasks.sessions_of(user_id)
    messages = session.scalars(select(Message).where(Message.user_id == user_id).order_by(Message.id)).all()
    profiles = session.scalars(select(ProfileVersion).where(ProfileVersion.user_id == user_id)
                               .order_by(ProfileVersion.kind, ProfileVersion.version)).all()
    recalls = session.scalars(select(RecallEvent).where(RecallEvent.user_id == user_id)
                              .order_by(RecallEvent.id)).all()
    answers = session.scalars(select(QuestionnaireResponse).where(QuestionnaireResponse.user_id == user_id)
                              .order_by(QuestionnaireResponse.id)).all()
    runs = session.scalars(select(ConsolidationRun).where(ConsolidationRun.user_id == user_id)
                           .order_by(ConsolidationRun.id)).all()
    failures = session.scalars(select(ProviderFailure).where(ProviderFailure.user_id == user_id)
                               .order_by(ProviderFailure.id)).all()
    return {
        "participant": row,
        "task_sessions": [{
            "id": s.id, "task_id": s.task_id, "attempt": s.attempt, "status": s.status, "phase": s.phase,
            "started_at": _iso(s.started_at), "chat_ended_at": _iso(s.chat_ended_at),
            "completed_at": _iso(s.completed_at), "active_seconds": round(s.active_seconds, 1),
            "idle_gap_count": s.idle_gap_count, "idle_seconds": round(s.idle_seconds, 1),
            "end_reason": s.end_reason, "reset_reason": s.reset_reason,
            "consolidation_status": s.consolidation_status,
        } for s in sessions],
        "messages": [serialise_message(m, participant_view=False) for m in messages],
        "profiles": [{
            "kind": p.kind, "version": p.version, "task_id": p.task_id, "content": p.content,
            "rendered": p.rendered, "source": p.source, "created_at": _iso(p.created_at),
        } for p in profiles],
        "recall_events": [{
            "id": e.id, "query_message_id": e.query_message_id, "memory_message_id": e.memory_message_id,
            "task_id": e.task_id, "rank": e.rank, "cosine": e.cosine, "r": e.r, "t": e.t,
            "g_before": e.g_before, "g_after": e.g_after, "p": e.p, "p_final": e.p_final,
            "salience": e.salience, "recalled": e.recalled, "created_at": _iso(e.created_at),
        } for e in recalls],
        "questionnaires": [{
            "task_id": a.task_id, "instrument": a.instrument, "item_id": a.item_id, "value": a.value,
            "submitted_at": _iso(a.submitted_at),
        } for a in answers],
        "consolidation_runs": [{
            "id": r.id, "task_id": r.task_id, "trigger": r.trigger, "status": r.status,
            "started_at": _iso(r.started_at), "finished_at": _iso(r.finished_at), "error": r.error,
            "steps": r.steps, "provider": r.provider,
        } for r in runs],
        "provider_failures": [{
            "at": _iso(f.at), "provider": f.provider, "model": f.model, "purpose": f.purpose,
            "error_class": f.error_class, "status_code": f.status_code, "message": f.message,
            "message_id": f.message_id, "fallback_provider": f.fallback_provider,
        } for f in failures],
    }
