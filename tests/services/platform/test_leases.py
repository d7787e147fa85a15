"""Database leases: one holder at a time across engines (= processes), expiry, scheduler leadership,
and the sweep catching up an S1 rewrite that a dead worker never ran."""
from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest
from sqlalchemy import select

from database.db_manager import Database
from database.models import Message, ProfileVersion
from services.chat.chat_service import catch_up_turn_upkeep
from services.memory import registry
from services.platform import leases
from services.platform.leases import LeaseBusy, SchedulerLeadership, participant_guard, try_acquire

pytestmark = pytest.mark.postgres


@pytest.fixture
def other_process_db(database):
    """A second engine on the same database: what another server process sees."""
    db = Database(database.url)
    yield db
    db.dispose()


def test_a_lease_has_one_holder_until_it_is_released_or_expires(database, other_process_db):
    now = leases.utc_now()
    assert try_acquire(database, "job", "a", 30, now=lambda: now)
    assert not try_acquire(other_process_db, "job", "b", 30, now=lambda: now)
    assert try_acquire(database, "job", "a", 30, now=lambda: now)  # the holder renews
    later = now + timedelta(seconds=31)
    assert try_acquire(other_process_db, "job", "b", 30, now=lambda: later)  # a's lease expired
    assert not try_acquire(database, "job", "a", 30, now=lambda: later)
    leases.release(database, "job", "a")  # not a's any more: nothing happens
    assert not try_acquire(database, "job", "a", 30, now=lambda: later)
    leases.release(other_process_db, "job", "b")
    assert try_acquire(database, "job", "a", 30, now=lambda: later)


def test_participant_guard_serialises_across_processes_and_times_out(database, other_process_db):
    inside: list[str] = []
    overlap = threading.Event()
    lock = threading.Lock()

    def rewrite(db: Database, name: str) -> None:
        with participant_guard(db, 7, wait_seconds=30):
            with lock:
                if inside:
                    overlap.set()
                inside.append(name)
            time.sleep(0.05)
            with lock:
                inside.remove(name)

    threads = [threading.Thread(target=rewrite, args=(db, f"{n}")) for n, db in
               enumerate([database, other_process_db] * 4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not overlap.is_set()
    with participant_guard(database, 7):
        with pytest.raises(LeaseBusy):
            with participant_guard(other_process_db, 7, wait_seconds=0.2):
                pass
        with participant_guard(other_process_db, 8, wait_seconds=0.2):  # another participant is free
            pass


def test_exactly_one_process_leads_the_scheduler_and_another_takes_over(database, other_process_db):
    clock = {"now": leases.utc_now()}
    first = SchedulerLeadership(database, ttl_seconds=30, now=lambda: clock["now"])
    second = SchedulerLeadership(other_process_db, ttl_seconds=30, now=lambda: clock["now"])
    assert first.renew() and first.is_leader()
    assert not second.renew() and not second.is_leader()
    clock["now"] += timedelta(seconds=20)
    assert first.renew() and not second.renew()  # the leader renews in time
    clock["now"] += timedelta(seconds=31)  # the leader died: it stopped renewing
    assert second.renew() and second.is_leader()
    assert not first.renew() and not first.is_leader()
    second.resign()
    assert first.renew()


def test_the_sweep_runs_an_s1_rewrite_a_dead_worker_never_ran(app, clock, make_participant, monkeypatch):
    from services.chat import chat_service

    runtime = app.extensions["memory_lab"]
    runtime.settings.study = runtime.study.with_overrides({"enabled_conditions": ["S1"]})
    api = make_participant("s1sweep")
    api.post("/api/tasks/T1/start")
    lost: list[int] = []
    # the worker "dies" before the rewrite: after_reply's background job never runs
    monkeypatch.setattr(chat_service, "after_reply", lambda rt, reply_id: lost.append(reply_id))
    for text in ("我叫陈晨。", "我对花生过敏。"):
        clock.advance(5)
        assert api.post("/api/tasks/T1/messages", json={"content": text}).status_code == 201
    with runtime.db.Session() as session:
        assert session.scalars(select(ProfileVersion).where(ProfileVersion.kind == "s1_summary")).all() == []
        # within the grace period it may still be on its way: not yet pending
        assert registry.get("S1").turns_behind(session, before=clock.now() - timedelta(seconds=60)) == []
    clock.advance(120)
    assert catch_up_turn_upkeep(runtime) == [lost[-1]]
    with runtime.db.Session() as session:
        summary = session.scalars(select(ProfileVersion).where(ProfileVersion.kind == "s1_summary")).one()
        assert summary.content["basis"]["through_message_id"] == lost[-1]
        assert "花生" in summary.rendered
        assert session.get(Message, lost[-1]).role == "assistant"
    assert catch_up_turn_upkeep(runtime) == []  # done once, not again
