"""Background work survives overload: the scheduler's jobs and its lease renewal have connections of
their own, so a request pool a class has used up never makes the scheduler skip a renewal or a sweep;
and a consolidation run that is still working is never taken for dead and done again."""
from __future__ import annotations

import threading
import time

import pytest
from sqlalchemy import insert, select, text, update

from database.db_manager import Database
from database.models import ConsolidationRun, TaskSession
from services.operations import scheduler
from services.study.settings import ServingConfig
from tests.services.memory.test_consolidation_service import runs, seed, service

pytestmark = pytest.mark.postgres


@pytest.fixture
def starved_app(monkeypatch, settings, clock, database):
    """An app whose one-connection request pool is held by someone else (a class at its peak)."""
    from app import create_app

    monkeypatch.setattr(settings, "serving", ServingConfig(db_pool_size=1, db_max_overflow=0, db_pool_timeout=2))
    app = create_app(settings, clock=clock)
    runtime = app.extensions["memory_lab"]
    held = runtime.db.engine.connect()
    held.execute(select(1))
    yield app
    held.close()
    runtime.db.dispose()


def test_the_lease_and_the_jobs_run_while_the_request_pool_is_used_up(starved_app):
    # the live study's version check is due at every job (it is every STUDY_REFRESH_SECONDS): the sweep reads it
    # through the background pool too, not the request pool (it used to wait there and fail once the check was due)
    starved_app.extensions["memory_lab"].studies.refresh_seconds = 0
    sched = scheduler.start_scheduler(starved_app, start=False)
    leadership = starved_app.extensions["memory_lab_scheduler_leadership"]
    assert leadership.renew() is True  # on its own connection, not queued behind the requests
    assert leadership.is_leader()
    for job_id in ("consolidation_sweep", "mark_overdue"):
        job = sched.get_job(job_id)
        assert job.func(*job.args) is not None, job_id  # ran (as leader) on the background pool
    lease_job = sched.get_job("scheduler_lease")
    assert lease_job.executor == "lease"  # never queued behind a long sweep in the jobs' thread pool


def test_a_run_slower_than_its_lease_keeps_its_claim(database, settings, clock):
    """The run's heartbeat renews its lease: a run still working past ``lease_seconds`` is busy to
    everyone else, not abandoned and redone (which doubled the model calls and logged a false failure)."""
    _, ts_id = seed(database, clock)
    other = service(database, settings, clock, lease_seconds=600)
    seen: list[str] = []

    def hook(step: str) -> None:
        if step == "claimed":
            clock.advance(601)  # the run outlives its lease...
            time.sleep(0.3)  # ...while its heartbeat (every 0.05 s here) says it is alive
            seen.append(other.consolidate_task_session(ts_id).status)

    slow = service(database, settings, clock, lease_seconds=600, heartbeat_seconds=0.05, step_hook=hook)
    assert slow.consolidate_task_session(ts_id).status == "succeeded"
    assert seen == ["busy"]
    assert [run.status for run in runs(database, ts_id)] == ["succeeded"]


def test_a_claim_that_waited_for_another_claim_sees_its_run(database, settings, clock):
    """Another process claims the session (row locked, run row written) while this one's claim waits
    for the row: once it commits, this claim must see that fresh run as alive, not abandon it."""
    _, ts_id = seed(database, clock)
    with database.session() as session:
        session.execute(update(TaskSession).where(TaskSession.id == ts_id).values(consolidation_status="pending"))
    other_process = Database(database.url)
    results: list[str] = []
    try:
        conn = other_process.engine.connect()
        transaction = conn.begin()
        if database.url.startswith("sqlite"):
            conn.execute(text("SELECT 1"))
        conn.execute(update(TaskSession).where(TaskSession.id == ts_id).values(consolidation_status="running"))
        ts = conn.execute(select(TaskSession.user_id, TaskSession.task_id).where(TaskSession.id == ts_id)).one()
        conn.execute(insert(ConsolidationRun).values(user_id=ts.user_id, task_session_id=ts_id, task_id=ts.task_id,
                                                     trigger="task_end", status="running", started_at=clock.now(),
                                                     steps={}))
        waiting = threading.Thread(target=lambda: results.append(
            service(database, settings, clock).consolidate_task_session(ts_id).status))
        waiting.start()
        time.sleep(0.5)  # the claim is now blocked on the session's row (PostgreSQL) or the write lock
        transaction.commit()
        conn.close()
        waiting.join(timeout=30)
    finally:
        other_process.dispose()
    assert results == ["busy"]
    assert [run.status for run in runs(database, ts_id)] == ["running"]  # the other run, untouched
