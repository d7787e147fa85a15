"""Pilot mode must not test an unconsolidated memory (issue 17, item 6): starting a task runs or waits for
the consolidation of the participant's earlier tasks, bounded, with an audit note when it gives up; a dead
run's claim scales with pilot time; the admin's "consolidate now" says why it ran nothing."""
from __future__ import annotations

from dataclasses import replace

import pytest
from sqlalchemy import select

from config import Settings
from database.models import AuditLog, ConsolidationRun, TaskSession, User
from services.chat import chat_service
from services.memory.consolidation_service import ConsolidationService
from tests.conftest import walk_task


def _session_of(app, username: str, task_id: str) -> TaskSession:
    runtime = app.extensions["memory_lab"]
    with runtime.db.Session() as session:
        user = session.scalar(select(User).where(User.username == username))
        return session.scalar(select(TaskSession).where(TaskSession.user_id == user.id,
                                                        TaskSession.task_id == task_id))


def _t1_left_unconsolidated(app, make_participant, clock, study, monkeypatch, username="pilot1"):
    """T1 walked and closed, but the consolidation queued at its end never ran (the process died)."""
    monkeypatch.setattr(chat_service, "on_chat_ended", lambda runtime, task_session_id: None)
    api = make_participant(username)
    walk_task(api, clock, "T1", ["我叫林晓雨，我对海鲜过敏。", "我养了一只猫。"], study=study)
    assert _session_of(app, username, "T1").consolidation_status == "pending"
    clock.advance(days=3)
    return api


@pytest.mark.postgres
def test_starting_a_task_consolidates_the_earlier_task_first(app, make_participant, clock, study, monkeypatch):
    api = _t1_left_unconsolidated(app, make_participant, clock, study, monkeypatch)
    assert api.post("/api/tasks/T2/start").status_code == 201
    t1 = _session_of(app, "pilot1", "T1")
    assert t1.consolidation_status == "done"
    with app.extensions["memory_lab"].db.Session() as session:
        [run] = session.scalars(select(ConsolidationRun).where(ConsolidationRun.task_session_id == t1.id)).all()
        assert (run.trigger, run.status) == ("task_start", "succeeded")
        assert not session.scalars(select(AuditLog).where(AuditLog.action == "task_start_unconsolidated")).all()


def _hold_claim(app, task_session_id: int, clock) -> None:
    """A consolidation run that died mid-way: the session is claimed and its run row says running."""
    with app.extensions["memory_lab"].db.session() as session:
        ts = session.get(TaskSession, task_session_id)
        ts.consolidation_status = "running"
        session.add(ConsolidationRun(user_id=ts.user_id, task_session_id=ts.id, task_id=ts.task_id,
                                     trigger="task_end", status="running", started_at=clock.now(), steps={}))


@pytest.mark.postgres
def test_a_task_opens_after_a_bounded_wait_with_an_audit_note(app, make_participant, clock, study, monkeypatch):
    api = _t1_left_unconsolidated(app, make_participant, clock, study, monkeypatch)
    t1 = _session_of(app, "pilot1", "T1")
    _hold_claim(app, t1.id, clock)
    runtime = app.extensions["memory_lab"]
    runtime.settings = replace(runtime.settings, task_start_consolidation_wait_seconds=0.3)
    assert api.post("/api/tasks/T2/start").status_code == 201  # the participant is not kept waiting
    with runtime.db.Session() as session:
        [note] = session.scalars(select(AuditLog).where(AuditLog.action == "task_start_unconsolidated")).all()
    assert note.target_user_id == t1.user_id and note.details["task_id"] == "T2"
    assert note.details["waited_seconds"] >= 0.3
    [held] = note.details["unconsolidated"]
    assert held["task_id"] == "T1" and held["consolidation_status"] == "running" and held["lease_until"]


@pytest.mark.postgres
def test_consolidate_now_says_why_it_ran_nothing(app, make_participant, admin_client, clock, study, monkeypatch):
    _t1_left_unconsolidated(app, make_participant, clock, study, monkeypatch)
    t1 = _session_of(app, "pilot1", "T1")
    _hold_claim(app, t1.id, clock)
    body = admin_client.post(f"/api/admin/participants/{t1.user_id}/consolidate").get_json()
    assert body["runs"] == []
    assert "T1 (task session" in body["reason"] and "is being consolidated by another process since" in body["reason"]
    assert "lease until" in body["reason"] and body["held"][0]["task_session_id"] == t1.id
    everyone = admin_client.post("/api/admin/consolidate-pending").get_json()
    assert everyone["runs"] == [] and "being consolidated by another process" in everyone["reason"]
    clock.advance(901)  # the dead run's lease is over: consolidate now takes over
    body = admin_client.post(f"/api/admin/participants/{t1.user_id}/consolidate").get_json()
    assert [r["status"] for r in body["runs"]] == ["succeeded"] and "reason" not in body
    body = admin_client.post(f"/api/admin/participants/{t1.user_id}/consolidate").get_json()
    assert body == {"runs": [], "reason": "nothing to consolidate: every closed task is consolidated", "held": [],
                    "in_progress": [], "not_needed": []}


def test_a_dead_runs_claim_scales_with_pilot_time(settings, database, clock):
    def lease(**values) -> float:
        return ConsolidationService(database, replace(settings, **values), clock=clock).lease.total_seconds()

    assert lease(day_seconds=86400) == 900
    assert lease(day_seconds=10) == 60  # 900 s x 10/86400 is 0.1 s: floored at a slow model's run
    assert lease(day_seconds=43200) == 450
    assert lease(day_seconds=10, consolidation_lease_seconds=5) == 5


def test_lease_and_wait_come_from_the_environment(monkeypatch):
    monkeypatch.setenv("CONSOLIDATION_LEASE_SECONDS", "30")
    monkeypatch.setenv("TASK_START_CONSOLIDATION_WAIT_SECONDS", "2.5")
    settings = Settings.from_env()
    assert settings.consolidation_lease == 30 and settings.task_start_consolidation_wait_seconds == 2.5
    monkeypatch.setenv("CONSOLIDATION_LEASE_SECONDS", "0")
    try:
        Settings.from_env()
    except ValueError as exc:
        assert "CONSOLIDATION_LEASE_SECONDS" in str(exc)
    else:
        raise AssertionError("a zero lease was accepted")
