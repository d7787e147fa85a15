"""What admins see and do: the monitor, a participant's whole record, usage and failures,
and the actions (consolidate, withdraw, reset a stuck task), each audited."""
from __future__ import annotations

import logging
from collections import Counter, defaultdict
from datetime import datetime
from typing import Any

from sqlalchemy import func, or_, select
from sqlalchemy.orm import Session

from database.models import (
    AuditLog,
    ConsolidationRun,
    Message,
    PanelEntry,
    ProfileVersion,
    ProviderFailure,
    QuestionnaireResponse,
    RecallEvent,
    Reminder,
    TaskSession,
    User,
)
from services.chat.chat_service import serialise_message
from services.hosting.runtime import Runtime
from services.memory import registry as memory_registry
from services.memory.consolidation_service import ConsolidationService
from services.participants.account_service import FAILED_LOGIN_WINDOW, failed_logins
from services.participants.erasure_service import tombstone
from services.participants.panel_service import link_summary
from services.participants.quality import participant_quality, typing_flags
from services.platform.clock import utc_iso
from services.platform.errors import BadInput, Conflict, NotFound
from services.study.definition import Study
from services.study.timer_service import TaskService

PARTICIPANT_STATUSES = ("active", "withdrawn", "erased")
# the monitor's words for a participant: "completed" is an active account that has done every task
MONITOR_STATUSES = ("active", "completed", "withdrawn", "erased")
# how a task's memory stands, the same words in the monitor, the record and the "consolidate now" answer:
# in_progress (the chat is still open: consolidated once it closes), pending (closed, waiting), running,
# failed, done, not_needed (the participant withdrew before finishing the task: it is never consolidated)
CONSOLIDATION_STATES = ("in_progress", "pending", "running", "failed", "done", "not_needed")


def consolidation_state(ts: TaskSession, participant_status: str) -> str | None:
    """One of CONSOLIDATION_STATES for a task attempt; None for a reset attempt (it no longer counts)."""
    if ts.status == "reset":
        return None
    if ts.consolidation_status == "done":
        return "done"
    if participant_status != "active" and ts.status != "done":
        return "not_needed"
    if ts.status == "in_progress" and ts.phase == "chat":
        return "in_progress"
    return ts.consolidation_status if ts.consolidation_status in ("running", "failed") else "pending"


def _recalls(group: str | None) -> bool:
    if not group:
        return False
    try:
        return memory_registry.get(group).manipulation_check.recalls_messages
    except memory_registry.UnknownCondition:
        return False


def monitor_status(user: User, overview: list[dict[str, Any]]) -> str:
    """The participant's status as the monitor shows it: an active account with every task done is completed."""
    if user.status == "active" and overview and all(t["status"] == "done" for t in overview):
        return "completed"
    return user.status

log = logging.getLogger(__name__)




def _counts(session: Session, model, column) -> dict[int, int]:
    return dict(session.execute(select(column, func.count()).select_from(model).group_by(column)).all())


# -- monitor ---------------------------------------------------------------------------------------


def _reminders(session: Session) -> dict[int, list[dict[str, Any]]]:
    by_user: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for r in session.scalars(select(Reminder).order_by(Reminder.id)):
        by_user[r.user_id].append({"task_id": r.task_id, "kind": r.kind, "channel": r.channel, "status": r.status,
                                   "attempts": r.attempts, "sent_at": utc_iso(r.sent_at), "error": r.error})
    return by_user


def monitor_rows(session: Session, tasks: TaskService) -> list[dict[str, Any]]:
    participants = session.scalars(select(User).where(User.role == "participant").order_by(User.id)).all()
    quality = participant_quality(session, tasks.study)
    reminders = _reminders(session)
    messages = _counts(session, Message, Message.user_id)
    failures = _counts(session, ProviderFailure, ProviderFailure.user_id)
    questionnaires = dict(session.execute(
        select(QuestionnaireResponse.user_id, func.count(func.distinct(QuestionnaireResponse.task_session_id)))
        .group_by(QuestionnaireResponse.user_id)).all())
    rows = []
    for user in participants:
        sessions = tasks.sessions_of(user.id)
        overview = admin_task_view(user, tasks.overview(user), live_attempts(sessions))
        # a chat still open is "in_progress", not "pending"; a withdrawn participant's unfinished task "not_needed"
        states = {s.task_id: consolidation_state(s, user.status) for s in sessions if s.status != "reset"}
        rows.append({
            "id": user.id,
            "participant_code": user.participant_code,
            "username": user.username,
            "memory_group": user.memory_group,
            # the condition recalls earlier messages on a forgetting curve (the plots page opens on such a one)
            "forgetting_curve": _recalls(user.memory_group),
            "status": monitor_status(user, overview),
            "account_status": user.status,
            "enrolled_at": utc_iso(user.consent_at or user.created_at),
            "last_active_at": utc_iso(user.last_active_at),
            "withdrawn_at": utc_iso(user.withdrawn_at),
            "withdrawn_by": user.withdrawn_by,
            "tasks": {t["id"]: t["status"] for t in overview},
            "task_details": overview,
            # a withdrawn participant is no longer expected to do anything
            "overdue": user.status == "active" and any(t.get("overdue") for t in overview),
            "messages": messages.get(user.id, 0),
            "questionnaires_done": questionnaires.get(user.id, 0),
            "consolidation": states,
            "consolidation_pending": sum(1 for c in states.values() if c in ("pending", "failed")),
            "provider_failures": failures.get(user.id, 0),
            "external_id": user.external_id,
            "erased_at": utc_iso(user.erased_at),
            **quality[user.id],
            "reminders": reminders.get(user.id, []),
        })
    return rows


def live_attempts(sessions: list[TaskSession]) -> dict[str, TaskSession]:
    """task id -> the attempt that counts (the latest one not reset), from all of a participant's sessions."""
    live: dict[str, TaskSession] = {}
    for ts in sorted(sessions, key=lambda s: s.attempt):
        if ts.status != "reset":
            live[ts.task_id] = ts
    return live


def admin_task_view(user: User, overview: list[dict[str, Any]], live: dict[str, TaskSession]
                    ) -> list[dict[str, Any]]:
    """The task overview as an admin reads it. The participant's own view calls every unfinished task of a
    withdrawn participant "locked"; here it is "withdrawn" (or "erased"), with ``progress``: how far the
    task had got (not_started, in_progress with its phase, or abandoned). Done tasks stay done."""
    if user.status == "active":
        return overview
    result = []
    for entry in overview:
        ts = live.get(entry["id"])
        if entry["status"] == "done":
            result.append(entry)
            continue
        view = {**entry, "status": user.status, "overdue": False,
                "progress": "not_started" if ts is None else ts.status}
        if ts is not None:
            view.update(phase=ts.phase, started_at=utc_iso(ts.started_at), end_reason=ts.end_reason)
        result.append(view)
    return result


def reset_options(study: Study, live: dict[str, TaskSession]) -> list[dict[str, Any]]:
    """Per task: can an admin reset it now, and if not, the code saying why (task_not_started, task_done),
    which the console words in the admin's language."""
    options = []
    for task_id in study.task_ids:
        ts = live.get(task_id)
        code = "task_not_started" if ts is None else "task_done" if ts.status == "done" else None
        options.append({"task_id": task_id, "allowed": code is None, "code": code})
    return options


def _flag(raw: str | None, name: str) -> bool | None:
    if raw is None or raw == "":
        return None
    lowered = raw.strip().lower()
    if lowered in ("1", "true", "yes"):
        return True
    if lowered in ("0", "false", "no"):
        return False
    raise BadInput(f"{name} must be 1 or 0", code="invalid_filter", details={name: raw})


def filter_rows(rows: list[dict[str, Any]], study: Study, *, group: str | None = None,
                status: str | None = None, overdue: str | None = None, pasted: str | None = None,
                failed_checks: str | None = None, implausible_typing: str | None = None) -> list[dict[str, Any]]:
    """The monitor's filters: memory group, participant status, and the 1/0 flags overdue, pasted
    (sent a message with pasted text), failed_checks (failed an attention check) and implausible_typing
    (sent a message typed implausibly fast or with too few keystrokes)."""
    if group:
        if group not in study.conditions:
            raise BadInput(f"unknown memory group {group!r}", code="invalid_filter", details={"group": group})
        rows = [r for r in rows if r["memory_group"] == group]
    if status:
        if status not in MONITOR_STATUSES:
            raise BadInput(f"status must be one of {', '.join(MONITOR_STATUSES)}", code="invalid_filter",
                           details={"status": status})
        rows = [r for r in rows if r["status"] == status]
    flags = {"overdue": (overdue, lambda r: r["overdue"]),
             "pasted": (pasted, lambda r: r["pasted_messages"] > 0),
             "failed_checks": (failed_checks, lambda r: r["attention_failures"] > 0),
             "implausible_typing": (implausible_typing, lambda r: r["implausible_typing_messages"] > 0)}
    for name, (raw, test) in flags.items():
        wanted = _flag(raw, name)
        if wanted is not None:
            rows = [r for r in rows if test(r) is wanted]
    return rows


def monitor_summary(rows: list[dict[str, Any]], study: Study) -> dict[str, Any]:
    """Counts per group and the completion funnel (registered -> T1 done -> ... -> T4 done).

    Every enabled group is listed even when empty, so an empty cell is visible at a glance."""
    task_ids = study.task_ids
    groups: dict[str, int] = {g: 0 for g in study.enabled_conditions}
    funnel_by_group: dict[str, dict[str, int]] = {g: _empty_funnel(task_ids) for g in groups}
    funnel = _empty_funnel(task_ids)
    statuses = Counter({s: 0 for s in MONITOR_STATUSES})
    for row in rows:
        group = row["memory_group"] or "unassigned"
        groups[group] = groups.get(group, 0) + 1
        statuses[row["status"]] += 1
        for target in (funnel, funnel_by_group.setdefault(group, _empty_funnel(task_ids))):
            target["registered"] += 1
            for task_id in task_ids:
                if row["tasks"].get(task_id) == "done":
                    target[task_id] += 1
    return {
        "groups": groups,
        "enabled": list(study.enabled_conditions),
        "funnel": funnel,
        "funnel_by_group": funnel_by_group,
        "statuses": dict(statuses),
        "overdue": sum(1 for r in rows if r["overdue"]),
    }


def integrity_summary(session: Session, rows: list[dict[str, Any]], study: Study, now: datetime) -> dict[str, Any]:
    """What the monitor shows about who gets in: panel arrivals by outcome (refused re-entries of a known id
    from another browser, a full study, ids not on the allowlist, new ids turned away because the allowlist
    could not be used), accounts that consented but never
    started the first task, and accounts with repeated failed logins in the last 24 hours."""
    first = study.task_ids[0]
    entries = dict(session.execute(select(PanelEntry.outcome, func.count()).group_by(PanelEntry.outcome)).all())
    return {
        "panel_entries": {outcome: entries.get(outcome, 0)
                          for outcome in ("created", "returned", "refused", "full", "not_allowed",
                                          "allowlist_unavailable", "closed")},
        "consented_never_started": sum(1 for r in rows if r["status"] != "erased"
                                       and r["tasks"].get(first) in ("available", "locked")),
        "login_failures": failed_logins(session, now - FAILED_LOGIN_WINDOW),
    }


def _empty_funnel(task_ids: list[str]) -> dict[str, int]:
    return {"registered": 0, **{t: 0 for t in task_ids}}


# -- one participant ----------------------------------------------------------------------------------


def get_participant(session: Session, user_id: int) -> User:
    user = session.get(User, user_id)
    if user is None or user.role != "participant":
        raise NotFound("no such participant", code="unknown_participant")
    return user


def participant_record(session: Session, tasks: TaskService, user_id: int) -> dict[str, Any]:
    """Everything about one participant; for an erased participant, the tombstone only."""
    user = get_participant(session, user_id)
    if user.status == "erased":
        return {"erased": True, "tombstone": tombstone(user),
                "audit": [{"at": utc_iso(a.at), "action": a.action, "actor_user_id": a.actor_user_id}
                          for a in session.scalars(select(AuditLog).where(AuditLog.target_user_id == user_id)
                                                   .order_by(AuditLog.id))]}
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
    audit = session.scalars(select(AuditLog).where(AuditLog.target_user_id == user_id).order_by(AuditLog.id)).all()
    return {
        "participant": row,
        "timer_scale": tasks.timer_scale,
        "task_sessions": [{
            "id": s.id, "task_id": s.task_id, "attempt": s.attempt, "status": s.status, "phase": s.phase,
            "started_at": utc_iso(s.started_at), "chat_ended_at": utc_iso(s.chat_ended_at),
            "completed_at": utc_iso(s.completed_at), "active_seconds": round(s.active_seconds, 1),
            # real (wall-clock) seconds beside the study seconds: they differ in pilot mode
            "active_real_seconds": round(s.active_seconds * tasks.timer_scale, 1),
            "chat_wall_seconds": round((s.chat_ended_at - s.started_at).total_seconds(), 1)
            if s.chat_ended_at and s.started_at else None,
            "idle_gap_count": s.idle_gap_count, "idle_seconds": round(s.idle_seconds, 1),
            "end_reason": s.end_reason, "reset_reason": s.reset_reason,
            "consolidation_status": s.consolidation_status,
            "consolidation_state": consolidation_state(s, user.status),
        } for s in sessions],
        "messages": [_admin_message(m, tasks.study) for m in messages],
        "profiles": [{
            "kind": p.kind, "version": p.version, "task_id": p.task_id, "content": p.content,
            "rendered": p.rendered, "source": p.source, "created_at": utc_iso(p.created_at),
        } for p in profiles],
        "recall_events": [{
            "id": e.id, "query_message_id": e.query_message_id, "memory_message_id": e.memory_message_id,
            "task_id": e.task_id, "rank": e.rank, "cosine": e.cosine, "r": e.r, "t": e.t,
            "g_before": e.g_before, "g_after": e.g_after, "p": e.p, "p_final": e.p_final,
            "salience": e.salience, "recalled": e.recalled, "recalled_by": e.recalled_by,
            "via_message_id": e.via_message_id, "created_at": utc_iso(e.created_at),
        } for e in recalls],
        "questionnaires": [{
            "task_id": a.task_id, "instrument": a.instrument, "item_id": a.item_id, "value": a.value,
            "submitted_at": utc_iso(a.submitted_at), "instrument_title": _instrument_title(tasks.study, a.instrument),
        } for a in answers],
        "consolidation_runs": [{
            "id": r.id, "task_id": r.task_id, "trigger": r.trigger, "status": r.status,
            "started_at": utc_iso(r.started_at), "finished_at": utc_iso(r.finished_at), "error": r.error,
            "steps": r.steps, "provider": r.provider,
        } for r in runs],
        "provider_failures": [_failure_view(f, row["participant_code"]) for f in failures],
        "return_links": link_summary(session, user_id, tasks.clock.now()),
        "reset_options": reset_options(tasks.study, live_attempts(sessions)),
        "audit": [{"at": utc_iso(a.at), "action": a.action, "actor_user_id": a.actor_user_id, "details": a.details}
                  for a in audit],
    }


def _instrument_title(study: Study, instrument: str) -> dict[str, str] | None:
    """The construct's name per language, for researchers (None: an instrument the study file no longer has)."""
    known = study.instruments.get(instrument)
    return dict(known.title) if known is not None else None


def _admin_message(message: Message, study: Study) -> dict[str, Any]:
    """A stored message as the admin reads it, with why its typing is implausible (user messages; null if
    not judged, [] if plausible)."""
    view = serialise_message(message, participant_view=False)
    if message.role == "user":
        view["implausible_typing"] = typing_flags(len(message.content), message.typing_ms, message.keystrokes,
                                                  message.pasted_chars, study.typing_checks, message.input_kind)
    return view


# -- actions -------------------------------------------------------------------------------------------


def _reason(raw: Any, *, required: bool) -> str:
    if raw is None and not required:
        return ""
    if not isinstance(raw, str) or (required and not raw.strip()):
        raise BadInput("a reason is required", code="reason_required")
    if len(raw) > 2000:
        raise BadInput("the reason is longer than 2000 characters", code="reason_too_long")
    return raw.strip()


def withdraw(session: Session, user_id: int, *, admin: User, reason: Any, now: datetime) -> User:
    """Mark a participant withdrawn: every record is kept, no task can start, no reminder goes out."""
    user = get_participant(session, user_id)
    text = _reason(reason, required=False)
    if user.status == "withdrawn":
        raise Conflict("this participant has already withdrawn", code="already_withdrawn")
    if user.status == "erased":
        raise Conflict("this participant has been erased", code="already_erased")
    user.status = "withdrawn"
    user.withdrawn_at = now
    user.withdrawn_reason = text or None
    user.withdrawn_by = "admin"
    session.add(AuditLog(at=now, actor_user_id=admin.id, action="participant_withdrawn", target_user_id=user.id,
                         details={"reason": text, "participant_code": user.participant_code}))
    return user


def reset_task(session: Session, tasks: TaskService, user_id: int, task_id: str, *, admin: User,
               reason: Any) -> TaskSession:
    """Void the participant's current attempt at a task (kept, marked reset) so it can be started again."""
    get_participant(session, user_id)
    tasks.task_definition(task_id)
    text = _reason(reason, required=True)
    ts = tasks.live_session(user_id, task_id)
    if ts is None:
        raise Conflict(f"task {task_id} has not been started", code="task_not_started")
    tasks.reset(ts, admin=admin, reason=text)
    return ts


def consolidation_service(runtime: Runtime) -> ConsolidationService:
    return ConsolidationService(runtime.db, runtime.settings, llm=runtime.consolidation_llm or runtime.llm,
                                embedder=runtime.embedder, clock=runtime.clock)


def pending_consolidation(session: Session, *, user_id: int | None = None) -> list[int]:
    """Task sessions whose chat has closed but whose consolidation is pending or failed, oldest first.

    Wider than the consolidation service's own list, which waits for the questionnaire: a chat
    closed by the timer is memory already, even if the participant never answered."""
    query = select(TaskSession.id).join(User, User.id == TaskSession.user_id).where(
        TaskSession.status != "reset",
        TaskSession.consolidation_status.in_(("pending", "failed")),
        or_(TaskSession.status.in_(("done", "abandoned")), TaskSession.phase != "chat"),
        # a task the participant withdrew before finishing is not needed (consolidation_state: not_needed)
        or_(User.status == "active", TaskSession.status == "done"),
    )
    if user_id is not None:
        query = query.where(TaskSession.user_id == user_id)
    return list(session.scalars(query.order_by(TaskSession.started_at, TaskSession.id)))


def _recently_failed(session: Session, ids: list[int], since: datetime) -> set[int]:
    """Sessions among ``ids`` whose consolidation failed at or after ``since``."""
    if not ids:
        return set()
    last = dict(session.execute(
        select(ConsolidationRun.task_session_id, func.max(ConsolidationRun.started_at))
        .where(ConsolidationRun.task_session_id.in_(ids), ConsolidationRun.status == "failed")
        .group_by(ConsolidationRun.task_session_id)).all())
    failed = set(session.scalars(select(TaskSession.id).where(TaskSession.id.in_(ids),
                                                              TaskSession.consolidation_status == "failed")))
    return {ts_id for ts_id in failed if last.get(ts_id) is not None and last[ts_id] >= since}


def consolidate_pending(runtime: Runtime, *, user_id: int | None = None, trigger: str = "manual",
                        actor: User | None = None, failed_retry_after: datetime | None = None
                        ) -> list[dict[str, Any]]:
    """Consolidate every closed, unconsolidated task session (of one participant, or everyone's).

    With ``failed_retry_after`` (the scheduler's sweep), a session whose consolidation failed
    after that time waits for a later sweep, so a provider outage is not hammered every minute."""
    service = consolidation_service(runtime)
    with runtime.db.Session() as session:
        ids = pending_consolidation(session, user_id=user_id)
        for ts_id in service.pending_task_sessions(user_id=user_id):
            if ts_id not in ids:
                ids.append(ts_id)  # e.g. a run that died holding its claim
        if failed_retry_after is not None:
            waiting = _recently_failed(session, ids, failed_retry_after)
            ids = [ts_id for ts_id in ids if ts_id not in waiting]
    runs = [service.consolidate_task_session(ts_id, trigger=trigger).to_dict() for ts_id in ids]
    if actor is not None:
        with runtime.db.session() as session:
            session.add(AuditLog(at=runtime.clock.now(), actor_user_id=actor.id, action="consolidation_triggered",
                                 target_user_id=user_id, details={
                                     "task_session_ids": ids,
                                     "statuses": dict(Counter(r["status"] for r in runs)),
                                 }))
    return runs


def consolidate_now(runtime: Runtime, *, actor: User, user_id: int | None = None) -> dict[str, Any]:
    """The admin's "consolidate now": the runs, and when there are none, why (a claim held by another
    process, with its lease, is also logged: after a crash it stalls that task until the lease ends)."""
    runs = consolidate_pending(runtime, user_id=user_id, trigger="manual", actor=actor)
    answer: dict[str, Any] = {"runs": runs}
    if runs:
        return answer
    held = consolidation_service(runtime).live_runs(user_id=user_id)
    if held:
        answer["reason"] = "; ".join(
            f"{r['task_id']} (task session {r['task_session_id']}) is being consolidated by another process "
            f"since {utc_iso(r['running_since'])}, lease until {utc_iso(r['lease_until'])}" for r in held)
        log.warning("consolidate now found claimed sessions: %s", answer["reason"])
    else:
        waiting = _unconsolidated(runtime, user_id)
        answer["reason"] = _nothing_reason(waiting, user_id)
        answer["in_progress"], answer["not_needed"] = waiting["in_progress"], waiting["not_needed"]
    answer["held"] = [{**r, "running_since": utc_iso(r["running_since"]), "lease_until": utc_iso(r["lease_until"])}
                      for r in held]
    return answer


def _unconsolidated(runtime: Runtime, user_id: int | None) -> dict[str, list[str]]:
    """Task ids (of one participant, or everyone's) that "consolidate now" leaves alone, by state: in_progress
    (the chat is still open) and not_needed (withdrawn before finishing)."""
    found: dict[str, list[str]] = {"in_progress": [], "not_needed": []}
    with runtime.db.Session() as session:
        query = select(TaskSession, User.status).join(User, User.id == TaskSession.user_id).where(
            TaskSession.status != "reset")
        if user_id is not None:
            query = query.where(TaskSession.user_id == user_id)
        for ts, status in session.execute(query.order_by(TaskSession.task_id, TaskSession.id)):
            state = consolidation_state(ts, status)
            if state in found:
                found[state].append(ts.task_id)
    return found


def _nothing_reason(waiting: dict[str, list[str]], user_id: int | None) -> str:
    """Why "consolidate now" ran nothing, in the monitor's words."""
    parts = []
    if waiting["in_progress"]:
        parts.append(f"in progress: {_tasks_text(waiting['in_progress'], user_id)} (consolidated once the chat "
                     "closes)")
    if waiting["not_needed"]:
        parts.append(f"not needed (withdrawn): {_tasks_text(waiting['not_needed'], user_id)}")
    parts.append("every closed task is consolidated")
    return "nothing to consolidate: " + "; ".join(parts)


def _tasks_text(task_ids: list[str], user_id: int | None) -> str:
    if user_id is not None:
        return ", ".join(task_ids)
    counts = Counter(task_ids)
    return ", ".join(f"{task} x{n}" for task, n in sorted(counts.items()))


# -- failures and usage ------------------------------------------------------------------------------------


def _failure_view(f: ProviderFailure, participant_code: str | None) -> dict[str, Any]:
    """One failure row; ``try`` / ``action`` / ``retry_in_s`` are facts the console puts into words."""
    return {
        "id": f.id, "at": utc_iso(f.at), "provider": f.provider, "model": f.model, "purpose": f.purpose,
        "error_class": f.error_class, "status_code": f.status_code, "message": f.message,
        "user_id": f.user_id, "participant_code": participant_code, "message_id": f.message_id,
        "fallback_provider": f.fallback_provider,
        "try": f.try_number, "action": f.action, "retry_in_s": f.retry_in_s,
    }


def failure_log(session: Session, *, limit: int = 500) -> dict[str, Any]:
    """Provider failures, newest first, with each provider's replies and failures side by side."""
    codes = dict(session.execute(select(User.id, User.participant_code)).all())
    failures = session.scalars(select(ProviderFailure).order_by(ProviderFailure.at.desc(), ProviderFailure.id.desc())
                               .limit(limit)).all()
    per_provider: dict[str, dict[str, Any]] = defaultdict(lambda: {
        "replies": 0, "prompt_tokens": 0, "completion_tokens": 0, "failures": 0, "failures_by_purpose": {}})
    for provider, replies, prompt, completion in session.execute(
            select(Message.provider, func.count(), func.coalesce(func.sum(Message.prompt_tokens), 0),
                   func.coalesce(func.sum(Message.completion_tokens), 0))
            .where(Message.role == "assistant").group_by(Message.provider)):
        entry = per_provider[provider or "unknown"]
        entry.update(replies=replies, prompt_tokens=int(prompt), completion_tokens=int(completion))
    for provider, purpose, count in session.execute(
            select(ProviderFailure.provider, ProviderFailure.purpose, func.count())
            .group_by(ProviderFailure.provider, ProviderFailure.purpose)):
        entry = per_provider[provider]
        entry["failures"] += count
        entry["failures_by_purpose"][purpose] = count
    by_provider = []
    for name, entry in sorted(per_provider.items()):
        tries = entry["replies"] + entry["failures_by_purpose"].get("reply", 0)
        by_provider.append({"provider": name, **entry,
                            "reply_failure_rate": round(entry["failures_by_purpose"].get("reply", 0) / tries, 4)
                            if tries else None})
    return {
        "failures": [_failure_view(f, codes.get(f.user_id)) for f in failures],
        "total": session.scalar(select(func.count()).select_from(ProviderFailure)),
        "by_provider": by_provider,
    }


def _p95(values: list[float]) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))], 3)


def _usage_entry(rows: list[Message]) -> dict[str, Any]:
    latencies = [m.latency_ms for m in rows if m.latency_ms is not None]
    units = sorted({(m.params or {}).get("token_unit", "tokens") for m in rows})
    return {
        "replies": len(rows),
        "prompt_tokens": sum(m.prompt_tokens or 0 for m in rows),
        "completion_tokens": sum(m.completion_tokens or 0 for m in rows),
        "total_tokens": sum((m.prompt_tokens or 0) + (m.completion_tokens or 0) for m in rows),
        "latency_ms_total": round(sum(latencies), 3),
        "latency_ms_mean": round(sum(latencies) / len(latencies), 3) if latencies else None,
        "latency_ms_p95": _p95(latencies),
        "token_units": units,
    }


def usage(session: Session) -> dict[str, Any]:
    """Tokens and latency of every stored reply, per provider/model and per participant: what a study costs.

    Token counts are what each provider reported; the offline responder counts characters
    (``token_units``). Consolidation calls are listed as run counts per provider."""
    replies = session.scalars(select(Message).where(Message.role == "assistant").order_by(Message.id)).all()
    users = {u.id: u for u in session.scalars(select(User).where(User.role == "participant"))}
    by_model: dict[tuple[str, str], list[Message]] = defaultdict(list)
    by_user: dict[int, list[Message]] = defaultdict(list)
    for m in replies:
        by_model[(m.provider or "unknown", m.model or "unknown")].append(m)
        by_user[m.user_id].append(m)
    runs = dict(session.execute(select(ConsolidationRun.provider, func.count())
                                .group_by(ConsolidationRun.provider)).all())
    return {
        "by_provider": [{"provider": p, "model": model, **_usage_entry(rows)}
                        for (p, model), rows in sorted(by_model.items())],
        "by_participant": [{
            "user_id": uid, "participant_code": users[uid].participant_code if uid in users else None,
            "memory_group": users[uid].memory_group if uid in users else None, **_usage_entry(rows),
        } for uid, rows in sorted(by_user.items())],
        "consolidation_runs_by_provider": {(p or "unknown"): n for p, n in runs.items()},
        "totals": _usage_entry(list(replies)),
    }
