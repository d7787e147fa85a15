"""Task flow and the server-side task timer.

Tasks run strictly in order and once each. T1 is available at registration;
task k unlocks ``unlock_offset_days`` after T1 was completed, once task k-1 is
done. A task session moves chat -> questionnaire -> done.

Durations in the study definition are *study* seconds. In pilot mode
(``PILOT_DAY_SECONDS=N``) one study day lasts N real seconds, so every study
duration is multiplied by ``time_scale = N / 86400`` before it is compared with
the wall clock. The idle-gap threshold is the exception: it measures a person's
pause between actions, which pilot mode does not make shorter, so it stays in
real seconds; active time is credited at the compressed rate.
"""
from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import bindparam, func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from database.models import AuditLog, Message, TaskSession, User
from database.participant_lock import ParticipantErased
from services.platform.clock import Clock, utc_iso
from services.platform.errors import Conflict, Forbidden, NotFound
from services.study.definition import Study, Task

# every attempt not reset, oldest first; on every task request. Built once: a statement built per call is coerced
# and given its cache key anew each time (docs/benchmarks.md, "CPU per reply, session 12")
_LIVE_SESSIONS = select(TaskSession).where(TaskSession.user_id == bindparam("user_id"),
                                           TaskSession.status != "reset").order_by(TaskSession.attempt)


class TaskService:
    def __init__(self, session: Session, study: Study, *, time_scale: float, clock: Clock,
                 timer_scale: float | None = None, on_chat_ended: Callable[[int], None] | None = None) -> None:
        self.session = session
        # task timers may be compressed less than days in a pilot run (PILOT_TIMER_SCALE)
        self.timer_scale = time_scale if timer_scale is None else timer_scale
        self.on_chat_ended = on_chat_ended
        self._ended: list[int] = []
        self.study = study
        self.time_scale = time_scale
        self.clock = clock
        self.timing = study.timing
        self.task_ids = study.task_ids

    # -- lookup --------------------------------------------------------------------------------

    def task_definition(self, task_id: str) -> Task:
        try:
            return self.study.task(task_id)
        except KeyError:
            raise NotFound(f"unknown task {task_id!r}", code="unknown_task") from None

    def sessions_of(self, user_id: int) -> list[TaskSession]:
        return list(self.session.scalars(
            select(TaskSession).where(TaskSession.user_id == user_id).order_by(TaskSession.id)
        ))

    def live_session(self, user_id: int, task_id: str) -> TaskSession | None:
        """The attempt that counts: the latest one not reset."""
        return self.live_sessions(user_id).get(task_id)

    def live_sessions(self, user_id: int) -> dict[str, TaskSession]:
        """The attempt that counts (the latest one not reset) for every task the participant has started,
        in one query (the task overview runs on every task request; a query per task was most of a
        start's CPU). A participant has a handful of attempts, so one task's is looked up here too."""
        live: dict[str, TaskSession] = {}
        for ts in self.session.scalars(_LIVE_SESSIONS, {"user_id": user_id}):
            live[ts.task_id] = ts  # a later attempt replaces an earlier one
        return live

    def timer_delta(self, study_seconds: float) -> timedelta:
        return timedelta(seconds=study_seconds * self.timer_scale)

    # -- status ----------------------------------------------------------------------------------

    def overview(self, user: User) -> list[dict[str, Any]]:
        """Every task with its status, unlock time and (when running) its timer."""
        now = self.clock.now()
        live = self.live_sessions(user.id)
        t1 = live.get(self.task_ids[0])
        t1_done_at = t1.completed_at if t1 and t1.status == "done" else None
        result = []
        previous_done = True
        for task in self.study.tasks:
            ts = live.get(task.id)
            available_at = self._available_at(user, task, t1_done_at)
            entry: dict[str, Any] = {
                "id": task.id,
                "title": localised(task.title, user.language),
                "instructions": localised(task.instructions, user.language),
                "available_at": utc_iso(available_at),
                "overdue": False,
                "min_messages": self.min_messages(task.id),  # the minimum engagement, with min_active_seconds
            }
            if ts and ts.status == "done":
                entry.update(status="done", completed_at=utc_iso(ts.completed_at),
                             incomplete=ts.outcome == "incomplete")
            elif ts and ts.status == "in_progress":
                entry.update(status="in_progress", phase=ts.phase, started_at=utc_iso(ts.started_at),
                             timer=self.timer(ts, now))
            elif (previous_done or user.role == "preview") and available_at is not None and now >= available_at:
                overdue_at = available_at + timedelta(days=self.timing.overdue_after_days * self.time_scale)
                entry.update(status="available", overdue=now >= overdue_at)
            else:
                # why, so the page never names a false reason: the unlock time not reached, or the previous task
                waiting = previous_done and available_at is not None
                entry.update(status="locked", locked_reason="opens_at" if waiting else "previous_task")
            if user.status != "active" and entry["status"] != "done":
                entry.update(status="locked", locked_reason=user.status)
            previous_done = entry["status"] == "done"
            result.append(entry)
        return result

    def _available_at(self, user: User, task: Task, t1_done_at: datetime | None) -> datetime | None:
        if task.id == self.task_ids[0] or user.role == "preview":  # an admin's preview opens every task at once
            return user.consent_at or user.created_at
        if t1_done_at is None:
            return None
        return t1_done_at + timedelta(days=task.unlock_offset_days * self.time_scale)

    def status_of(self, user: User, task_id: str) -> dict[str, Any]:
        self.task_definition(task_id)
        return next(t for t in self.overview(user) if t["id"] == task_id)

    # -- timer -----------------------------------------------------------------------------------

    def timer(self, ts: TaskSession, now: datetime | None = None) -> dict[str, Any]:
        """The timer as of ``now``: the active time credited so far plus what the next action will credit
        for the time since the last one, so a reload or a second tab shows what the next heartbeat confirms."""
        now = now or self.clock.now()
        limit = self.timing.task_active_seconds
        active = min(float(limit), ts.active_seconds + self._pending_active_seconds(ts, now))
        remaining = max(0.0, limit - active)
        return {
            "active_seconds": round(active, 3),
            "limit_seconds": limit,
            "remaining_seconds": round(remaining, 3),
            # what the page counts down, on the wall clock (differs from study seconds in pilot mode)
            "remaining_real_seconds": round(remaining * self.timer_scale, 3),
            "min_active_seconds": self.timing.min_active_seconds,
            # the clocks side by side (pilot mode: study seconds = real seconds / timer_scale): what the next
            # action would credit, and what is credited so far (as of the last action: it never drops back)
            "timer_scale": self.timer_scale,
            "active_real_seconds": round(active * self.timer_scale, 3),
            "credited_active_seconds": round(min(float(limit), ts.active_seconds), 3),
            "credited_active_real_seconds": round(min(float(limit), ts.active_seconds) * self.timer_scale, 3),
            "can_finish": ts.phase == "chat" and active >= self.timing.min_active_seconds,
            "time_up": remaining <= 0,
            "idle_gap_real_seconds": self.timing.idle_gap_seconds,
        }

    def _pending_active_seconds(self, ts: TaskSession, now: datetime) -> float:
        """What touch() would credit now: the gap since the last action, unless it is already an idle gap."""
        if ts.phase != "chat" or ts.last_activity_at is None:
            return 0.0
        gap_real = max(0.0, (now - ts.last_activity_at).total_seconds())
        return gap_real / self.timer_scale if gap_real <= self.timing.idle_gap_seconds else 0.0

    def last_message_id(self, ts: TaskSession) -> int | None:
        """The newest message of the attempt: a page showing another id missed one (sent from a second tab)."""
        return self.session.scalar(select(func.max(Message.id)).where(Message.task_session_id == ts.id))

    def touch(self, ts: TaskSession) -> None:
        """Credit the time since the last action as active, unless it was an idle gap.

        Only the chat phase is timed: active_seconds is chat time (codebook), so a touch after the
        chat closed must not add questionnaire time to it.
        """
        if ts.phase != "chat":
            return
        now = self.clock.now()
        gap_real = max(0.0, (now - ts.last_activity_at).total_seconds())
        if gap_real <= self.timing.idle_gap_seconds:
            ts.active_seconds += gap_real / self.timer_scale
        else:
            ts.idle_gap_count += 1
            ts.idle_seconds += gap_real
        ts.last_activity_at = now
        if ts.phase == "chat" and ts.active_seconds >= self.timing.task_active_seconds:
            ts.active_seconds = float(self.timing.task_active_seconds)
            self._end_chat(ts, "time_up", now)

    # -- transitions -----------------------------------------------------------------------------

    def start(self, user: User, task_id: str) -> TaskSession:
        self._require_active(user)
        status = self.status_of(user, task_id)
        if status["status"] == "in_progress":
            live = self.live_session(user.id, task_id)  # reopening the page resumes the attempt
            if live is None:  # gone between the two reads: the participant was erased just now (410)
                raise ParticipantErased(user.id)
            return live
        if status["status"] != "available":
            raise Conflict(f"task {task_id} is {status['status']}", code=f"task_{status['status']}")
        now = self.clock.now()
        attempts = self.session.scalars(
            select(TaskSession.attempt).where(TaskSession.user_id == user.id, TaskSession.task_id == task_id)
        ).all()
        ts = TaskSession(user_id=user.id, task_id=task_id, attempt=max(attempts, default=0) + 1,
                         status="in_progress", phase="chat", started_at=now, last_activity_at=now,
                         active_seconds=0.0, consolidation_status="pending", study_version=self.study.version)
        self.session.add(ts)
        try:
            self.session.flush()
        except IntegrityError as exc:  # uq_task_live_attempt: a simultaneous start won
            self.session.rollback()
            raise Conflict(f"task {task_id} was started by another request just now", code="task_already_started",
                           details={"task_id": task_id}) from exc
        return ts

    def running_session(self, user: User, task_id: str, *, phase: str) -> TaskSession:
        """The in-progress attempt in ``phase``, or the right error for why there is none."""
        self._require_active(user)
        self.task_definition(task_id)
        ts = self.live_session(user.id, task_id)
        if ts is None or ts.status != "in_progress":
            status = self.status_of(user, task_id)["status"]
            raise Conflict(f"task {task_id} is {status}", code=f"task_{status}")
        if self.expire_if_abandoned(ts):
            self.commit()  # the closing stands even though this request is refused
        if ts.phase != phase:
            raise Conflict(f"task {task_id} is in its {ts.phase} phase", code=f"task_phase_{ts.phase}")
        return ts

    def finish_chat(self, ts: TaskSession) -> None:
        self.touch(ts)
        if ts.phase != "chat":
            return  # time ran out at this very touch; the chat is already closed
        if ts.active_seconds < self.timing.min_active_seconds:
            raise Conflict("the minimum task time has not been reached yet", code="too_early",
                           details={"timer": self.timer(ts)})
        self._end_chat(ts, "finished", self.clock.now())

    def complete(self, ts: TaskSession) -> None:
        """The questionnaire is in: the task is done, and ``complete`` or ``incomplete`` by its engagement."""
        ts.status = "done"
        ts.phase = "closed"
        ts.completed_at = self.clock.now()
        ts.outcome = "complete" if self.engaged(ts) else "incomplete"

    def min_messages(self, task_id: str) -> int:
        own = self.task_definition(task_id).min_participant_messages
        return self.timing.min_participant_messages if own is None else own

    def engaged(self, ts: TaskSession) -> bool:
        """The study's minimum engagement: enough participant messages and enough active chat time.
        Heartbeats add active time only, so a page left open never reaches it alone."""
        # only messages with real content, not repeating an earlier one (services.participants.quality)
        flags = self.session.scalars(select(Message.content_flags).where(Message.task_session_id == ts.id,
                                                                          Message.role == "user")).all()
        sent = sum(1 for f in flags if not ({"too_little_content", "near_duplicate"} & set(f or ())))
        return sent >= self.min_messages(ts.task_id) and ts.active_seconds >= self.timing.min_active_seconds

    def expire_if_abandoned(self, ts: TaskSession) -> bool:
        """Close the chat of an attempt open longer than the maximum wall time."""
        now = self.clock.now()
        if ts.phase == "chat" and now - ts.started_at >= self.timer_delta(self.timing.max_wall_seconds):
            self._end_chat(ts, "abandoned", now)
            return True
        return False

    def close_abandoned(self) -> list[TaskSession]:
        """Scheduler sweep: close every chat past the maximum wall time."""
        closed = []
        for ts in self.session.scalars(
            select(TaskSession).where(TaskSession.status == "in_progress", TaskSession.phase == "chat")
        ):
            if self.expire_if_abandoned(ts):
                closed.append(ts)
        return closed

    def reset(self, ts: TaskSession, *, admin: User, reason: str) -> None:
        """Admin: void a stuck attempt (kept, marked reset) so the participant can start again."""
        if not reason.strip():
            raise Conflict("a reason is required to reset a task", code="reason_required")
        if ts.status == "done":
            raise Conflict("a completed task cannot be reset", code="task_done")
        ts.status = "reset"
        ts.phase = "closed"
        ts.reset_reason = reason
        ts.end_reason = ts.end_reason or "reset"
        ts.consolidation_status = "n/a"
        self.session.add(AuditLog(at=self.clock.now(), actor_user_id=admin.id, action="task_reset",
                                  target_user_id=ts.user_id,
                                  details={"task_id": ts.task_id, "attempt": ts.attempt, "reason": reason}))

    def _end_chat(self, ts: TaskSession, reason: str, now: datetime) -> None:
        ts.phase = "questionnaire"
        ts.chat_ended_at = now
        ts.end_reason = reason
        self._ended.append(ts.id)

    def commit(self) -> None:
        """Commit, then tell ``on_chat_ended`` about every chat this service closed (consolidation)."""
        self.session.commit()
        ended, self._ended = self._ended, []
        if self.on_chat_ended:
            for task_session_id in ended:
                self.on_chat_ended(task_session_id)

    @staticmethod
    def _require_active(user: User) -> None:
        if user.status == "withdrawn":
            raise Forbidden("this participant has withdrawn from the study", code="withdrawn")
        if user.status != "active":
            raise Forbidden("this account is closed", code=f"participant_{user.status}")


def localised(value: Any, language: str) -> str:
    if isinstance(value, dict):
        return value.get(language) or value.get("zh") or next(iter(value.values()), "")
    return value or ""


