"""Background jobs (APScheduler): the consolidation sweep, overdue marking, optional reminder e-mails.

Each job is a plain function of the app's ``Runtime`` so tests and the
``flask run-jobs`` command call it directly; ``start_scheduler(app)`` only puts
them on a timer.

* ``sweep_consolidation`` closes task chats open longer than the maximum wall
  time, then consolidates every closed task whose consolidation is pending or
  failed (a missed ``task_end`` trigger, a crash, a provider outage).
* ``answer_unanswered`` answers every participant message that was stored and acknowledged but got no
  reply (an overloaded server refused the reply with a 503 and the client did not ask again) a minute
  after it was stored, while its chat is open (services.chat.chat_service.answer_unanswered).
* ``mark_overdue`` records each newly overdue participant once (services.operations.overdue).
* ``send_reminders`` (off unless ``REMINDERS_ENABLED=1``) reminds participants of an unlocked or overdue
  task by e-mail or webhook (services.operations.reminders).
"""
from __future__ import annotations

import atexit
import logging
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from database.db_manager import LEASE_POOL_SIZE
from services.chat.chat_service import answer_unanswered, catch_up_turn_upkeep
from services.hosting.runtime import Runtime
from services.operations import admin_service
from services.operations.overdue import mark_overdue, task_service
from services.operations.reminders import send_reminders
from services.platform.leases import SchedulerLeadership
from services.study.settings import Settings

log = logging.getLogger(__name__)

FAILED_RETRY_MINUTES = 15.0


# -- consolidation sweep ----------------------------------------------------------------------------


def sweep_consolidation(runtime: Runtime, *, failed_retry_minutes: float = FAILED_RETRY_MINUTES) -> dict[str, Any]:
    """Close abandoned chats, consolidate every closed task still waiting for it, and run the
    per-turn memory upkeep (S1's summary rewrite) that never ran (a worker died with it queued).

    A task whose consolidation failed is retried once ``failed_retry_minutes`` have passed."""
    with runtime.db.Session() as session:
        closed = task_service(session, runtime).close_abandoned()
        closed_ids = [ts.id for ts in closed]
        session.commit()
    cutoff = runtime.clock.now() - timedelta(minutes=failed_retry_minutes)
    runs = admin_service.consolidate_pending(runtime, trigger="sweep", failed_retry_after=cutoff)
    rewrites = catch_up_turn_upkeep(runtime)
    if closed_ids or runs or rewrites:
        log.info("sweep: closed %d abandoned chat(s); consolidation runs: %s; per-turn upkeep caught up: %d",
                 len(closed_ids), ", ".join(f"{r['task_session_id']}={r['status']}" for r in runs) or "none",
                 len(rewrites))
    return {"closed": closed_ids, "runs": runs, "turn_upkeep": rewrites}



# -- the timer ----------------------------------------------------------------------------------------------


def job_intervals(settings: Settings) -> dict[str, float]:
    """Seconds between runs: ``settings.scheduler_intervals`` where it names a job, else the defaults. Pilot
    mode shortens the sweep and overdue checks with its short days."""
    quick = max(1.0, min(60.0, settings.day_seconds / 4)) if settings.pilot_mode else 60.0
    defaults = {"consolidation_sweep": quick, "mark_overdue": quick if settings.pilot_mode else 300.0,
                "send_reminders": 3600.0, "answer_unanswered": min(quick, 15.0)}
    return defaults | {job: float(seconds) for job, seconds in settings.scheduler_intervals.items() if seconds}


def _led(leadership: SchedulerLeadership, job_id: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` run only in the process that leads the scheduler (the others skip their turn)."""

    def job(*args: Any) -> Any:
        if not leadership.is_leader():
            return None
        log.info("scheduler job %s runs in %s", job_id, leadership.holder)
        return fn(*args)

    job.__name__ = job_id
    return job


def start_scheduler(app, *, start: bool = True):
    """Put the jobs on an APScheduler BackgroundScheduler and start it.

    Every server process may start one; the ``scheduler`` lease in the database makes
    exactly one of them run the jobs (services.platform.leases.SchedulerLeadership), and another
    takes over within a lease period when that process dies."""
    from apscheduler.executors.pool import ThreadPoolExecutor
    from apscheduler.schedulers.background import BackgroundScheduler

    # The jobs run on the background pool; the lease is renewed on a connection and a thread of its
    # own, so neither a class starving the requests' pool nor a long job can make it skip a renewal.
    runtime: Runtime = app.extensions["memory_lab"].for_jobs()
    intervals = job_intervals(runtime.settings)
    leadership = SchedulerLeadership(runtime.db.sibling(LEASE_POOL_SIZE, pool_timeout=5.0),
                                     ttl_seconds=lease_seconds(intervals))
    scheduler = BackgroundScheduler(timezone="UTC", job_defaults={
        "coalesce": True, "max_instances": 1, "misfire_grace_time": 300},
        executors={"default": ThreadPoolExecutor(4), "lease": ThreadPoolExecutor(1)})
    scheduler.add_job(leadership.renew, "interval", id="scheduler_lease", seconds=leadership.renew_seconds,
                      executor="lease", misfire_grace_time=None)
    jobs: list[tuple[str, Callable[..., Any], list[Any]]] = [
        ("consolidation_sweep", sweep_consolidation, [runtime]), ("mark_overdue", mark_overdue, [runtime]),
        ("answer_unanswered", answer_unanswered, [runtime])]
    reminders = runtime.settings.reminders
    if reminders.enabled:
        jobs.append(("send_reminders", send_reminders, [runtime, reminders]))
    for job_id, fn, args in jobs:
        scheduler.add_job(_led(leadership, job_id, fn), "interval", args=args, id=job_id, seconds=intervals[job_id])
    if start:
        leadership.renew()
        scheduler.start()
        atexit.register(_stop, scheduler, leadership)
        log.info("scheduler started: %s", ", ".join(f"{job_id} every {intervals[job_id]:g} s" for job_id, _, _ in jobs))
    app.extensions["memory_lab_scheduler"] = scheduler
    app.extensions["memory_lab_scheduler_leadership"] = leadership
    return scheduler


def lease_seconds(intervals: dict[str, float]) -> float:
    """The leadership lease: long enough to ride out a slow renewal, short enough for a quick takeover."""
    return max(15.0, min(45.0, 3 * intervals["consolidation_sweep"]))


def _stop(scheduler, leadership: SchedulerLeadership) -> None:
    if scheduler.running:
        scheduler.shutdown(wait=False)
    leadership.resign()


# ``flask run-jobs`` holds the scheduler lease for at most this long (a crashed run frees it after that).
RUN_JOBS_LEASE_SECONDS = 300.0


def run_jobs_once(runtime: Runtime, *, reminders: bool = False) -> dict[str, Any]:
    """Every job once, in order (the ``flask run-jobs`` command, e.g. from cron), under the scheduler lease:
    when a server's scheduler (or another run) holds it, that process runs the jobs and this run does
    nothing, so the jobs still run in one place at a time (``{"skipped": reason}``)."""
    leadership = SchedulerLeadership(runtime.db, ttl_seconds=RUN_JOBS_LEASE_SECONDS)
    if not leadership.renew():
        return {"skipped": "another process holds the scheduler lease and runs these jobs"}
    try:
        result: dict[str, Any] = {"answered": answer_unanswered(runtime), "sweep": sweep_consolidation(runtime),
                                  "overdue": mark_overdue(runtime)}
        if reminders:
            result["reminders"] = send_reminders(runtime)
        return result
    finally:
        leadership.resign()
