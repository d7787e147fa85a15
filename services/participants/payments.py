"""What each participant has earned: per-task compensation and the completion bonus from the study file.

Two CSV forms: the full sheet (code, panel id, status, tasks done with dates,
amounts) for the lab's books, and the upload form - ``id,amount`` with one row
per participant who is owed something and has a panel id - which Prolific's
bulk bonus box and Credamo/wjx payment sheets take as it is.

A task that ended below the study's minimum engagement (``incomplete``) is
not paid, and does not count towards the completion bonus, unless the study
file sets ``payments.pay_incomplete``; the sheet lists such tasks.

An erased participant keeps no panel id and no task record, so nothing can be
computed for them: pay before erasing (README).
"""
from __future__ import annotations

import csv
import io
from collections import defaultdict
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from database.models import AuditLog, TaskSession, User
from services.study.definition import Study
from services.text.cells import safe_cell

SHEET_COLUMNS = ["participant_code", "external_id", "status", "tasks_done", "completed_tasks", "first_completed_at",
                 "last_completed_at", "task_amount", "bonus", "total", "currency", "incomplete_tasks"]


def payment_rows(session: Session, study: Study) -> list[dict[str, Any]]:
    """One row per participant (admins excluded), in enrolment order."""
    per_task = study.payments.per_task
    bonus = float(study.payments.completion_bonus)
    task_ids = study.task_ids
    done: dict[int, dict[str, datetime]] = defaultdict(dict)
    incomplete: dict[int, list[str]] = defaultdict(list)
    for ts in session.scalars(select(TaskSession).where(TaskSession.status == "done")):
        done[ts.user_id][ts.task_id] = ts.completed_at
        if ts.outcome == "incomplete":
            incomplete[ts.user_id].append(ts.task_id)
    rows = []
    for user in session.scalars(select(User).where(User.role == "participant").order_by(User.id)):
        finished = done[user.id]
        tasks_done = [t for t in task_ids if t in finished]
        paid = [t for t in tasks_done if study.payments.pay_incomplete or t not in incomplete[user.id]]
        amount = round(sum(float(per_task.get(t, 0)) for t in paid), 2)
        earned_bonus = bonus if bonus and len(paid) == len(task_ids) else 0.0
        dates = sorted(finished.values())
        rows.append({
            "participant_code": user.participant_code, "external_id": user.external_id, "status": user.status,
            "tasks_done": len(tasks_done), "completed_tasks": ";".join(tasks_done),
            "first_completed_at": _time(dates[0]) if dates else None,
            "last_completed_at": _time(dates[-1]) if dates else None,
            "task_amount": f"{amount:.2f}", "bonus": f"{earned_bonus:.2f}",
            "total": f"{amount + earned_bonus:.2f}", "currency": study.payments.currency,
            "incomplete_tasks": ";".join(t for t in task_ids if t in incomplete[user.id]),
        })
    return rows


def record_download(session: Session, *, actor_id: int, now: datetime, upload: bool, rows: int) -> None:
    """Audit a payments download: it holds panel ids."""
    session.add(AuditLog(at=now, actor_user_id=actor_id, action="payments_exported",
                         details={"upload": upload, "participants": rows}))


def payments_csv(rows: list[dict[str, Any]], *, upload: bool = False) -> str:
    """The sheet, or (upload) ``id,amount`` rows for a panel: panel participants owed more than zero."""
    buffer = io.StringIO(newline="")
    writer = csv.writer(buffer, lineterminator="\r\n")
    if upload:
        for row in rows:
            if row["external_id"] and float(row["total"]) > 0:
                writer.writerow([safe_cell(row["external_id"], escape_formulas=True), row["total"]])
        return buffer.getvalue()
    writer.writerow(SHEET_COLUMNS)
    for row in rows:
        writer.writerow([safe_cell(row[c], escape_formulas=True) for c in SHEET_COLUMNS])
    return buffer.getvalue()


def _time(value: datetime | None) -> str | None:
    return value.isoformat(sep=" ", timespec="seconds") if value else None
