"""Who has a task open and not started: the overdue marking (audit action ``participant_overdue``) and the
list the reminders are sent from.

``mark_overdue`` records, once, each active participant whose next task has been available longer than
``overdue_after_days`` without being started; the monitor shows the same live.
"""
from __future__ import annotations

import logging
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from database.models import AuditLog, User
from services.hosting.runtime import Runtime
from services.study.timer_service import TaskService

log = logging.getLogger(__name__)

OVERDUE_ACTION = "participant_overdue"


def task_service(session: Session, runtime: Runtime) -> TaskService:
    if runtime.studies is not None:  # a process running only jobs sees newly published versions too
        # through the pool of the runtime the job runs with (the background pool): the request pool may be used up
        runtime.studies.refresh(session_factory=runtime.db.Session)
    return TaskService(session, runtime.study, time_scale=runtime.settings.time_scale,
                       timer_scale=runtime.settings.timer_scale, clock=runtime.clock)



# -- overdue ------------------------------------------------------------------------------------------


def open_tasks(session: Session, runtime: Runtime) -> list[dict[str, Any]]:
    """Every (active participant, task) that is available right now, not yet started: whether it is
    ``overdue`` and whether it is the study's ``first`` task (which opens at consent)."""
    tasks = task_service(session, runtime)
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

