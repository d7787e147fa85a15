"""TaskService at the service level: task order and unlocking, the active-time timer, transitions."""
from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import select

from database.models import AuditLog, User
from services.participants.account_service import create_admin, register
from services.platform.errors import Conflict, Forbidden, NotFound
from services.study.timer_service import TaskService


@pytest.fixture
def participant(db_session, study, clock) -> User:
    return register(db_session, username="carol_01", password="correct-horse-1", consent=True, language="en",
                    study=study, clock=clock, seed=5)


@pytest.fixture
def ended() -> list[int]:
    return []


@pytest.fixture
def tasks(db_session, study, clock, ended) -> TaskService:
    return TaskService(db_session, study, time_scale=1.0, clock=clock, on_chat_ended=ended.append)


def statuses(tasks: TaskService, user: User) -> dict[str, str]:
    return {t["id"]: t["status"] for t in tasks.overview(user)}


def chat_for(tasks: TaskService, clock, ts, seconds: float) -> None:
    """Stay active for ``seconds``: actions closer together than the idle gap."""
    step = tasks.timing.idle_gap_seconds / 2
    while seconds > 0:
        clock.advance(min(step, seconds))
        seconds -= step
        tasks.touch(ts)


def do_first_task(tasks: TaskService, clock, user: User):
    ts = tasks.start(user, "T1")
    chat_for(tasks, clock, ts, tasks.timing.min_active_seconds)
    tasks.finish_chat(ts)
    tasks.complete(ts)
    tasks.commit()
    return ts


def test_a_new_participant_can_start_the_first_task_only(tasks, participant, clock):
    overview = tasks.overview(participant)

    assert [t["status"] for t in overview] == ["available"] + ["locked"] * (len(overview) - 1)
    assert overview[0]["available_at"] == clock.now().isoformat(timespec="seconds") + "Z"
    assert all(t["available_at"] is None for t in overview[1:])  # unknown until T1 is done
    assert overview[0]["title"] == "Getting to know each other"  # the participant's language


def test_unknown_and_locked_tasks_cannot_be_started(tasks, participant):
    with pytest.raises(NotFound) as unknown:
        tasks.start(participant, "T9")
    assert unknown.value.code == "unknown_task"
    with pytest.raises(Conflict) as locked:
        tasks.start(participant, "T2")
    assert locked.value.code == "task_locked"
    assert tasks.sessions_of(participant.id) == []


def test_starting_again_resumes_the_running_attempt(tasks, participant):
    first = tasks.start(participant, "T1")
    assert tasks.start(participant, "T1").id == first.id
    assert (first.attempt, first.phase, first.status) == (1, "chat", "in_progress")
    assert statuses(tasks, participant)["T1"] == "in_progress"


def test_active_time_counts_short_gaps_and_an_idle_gap_only_as_idle(tasks, participant, clock):
    ts = tasks.start(participant, "T1")
    clock.advance(30)
    tasks.touch(ts)
    idle = tasks.timing.idle_gap_seconds + 1
    clock.advance(idle)
    tasks.touch(ts)

    assert ts.active_seconds == pytest.approx(30)
    assert (ts.idle_gap_count, ts.idle_seconds) == (1, pytest.approx(idle))
    timer = tasks.timer(ts)
    assert timer["remaining_seconds"] == pytest.approx(tasks.timing.task_active_seconds - 30)
    assert timer["can_finish"] is False and timer["time_up"] is False


def test_finishing_before_the_minimum_is_refused_with_the_timer(tasks, participant, clock, ended):
    ts = tasks.start(participant, "T1")
    chat_for(tasks, clock, ts, tasks.timing.min_active_seconds / 2)

    with pytest.raises(Conflict) as early:
        tasks.finish_chat(ts)

    assert early.value.code == "too_early"
    assert early.value.details["timer"]["can_finish"] is False
    assert ts.phase == "chat" and ended == []


def test_finishing_closes_the_chat_and_tells_consolidation_only_after_the_commit(tasks, participant, clock,
                                                                                   ended):
    ts = tasks.start(participant, "T1")
    chat_for(tasks, clock, ts, tasks.timing.min_active_seconds)
    assert tasks.timer(ts)["can_finish"] is True

    tasks.finish_chat(ts)
    assert (ts.phase, ts.end_reason, ts.chat_ended_at) == ("questionnaire", "finished", clock.now())
    assert ended == []
    tasks.commit()
    assert ended == [ts.id]
    with pytest.raises(Conflict) as wrong_phase:
        tasks.running_session(participant, "T1", phase="chat")
    assert wrong_phase.value.code == "task_phase_questionnaire"


def test_the_chat_closes_itself_when_the_active_time_is_used_up(tasks, participant, clock, ended):
    ts = tasks.start(participant, "T1")
    chat_for(tasks, clock, ts, tasks.timing.task_active_seconds - 30)
    assert ts.phase == "chat"
    clock.advance(tasks.timing.idle_gap_seconds)  # one last action that overshoots the limit
    tasks.touch(ts)

    assert ts.active_seconds == tasks.timing.task_active_seconds  # capped, not overcounted
    assert (ts.phase, ts.end_reason) == ("questionnaire", "time_up")
    assert tasks.timer(ts)["time_up"] is True
    tasks.commit()
    assert ended == [ts.id]

    clock.advance(60)  # the questionnaire phase is not chat time
    tasks.touch(ts)
    assert ts.active_seconds == tasks.timing.task_active_seconds


def test_the_next_task_unlocks_its_offset_after_the_first_is_done_and_then_turns_overdue(tasks, participant,
                                                                                          clock):
    t1 = do_first_task(tasks, clock, participant)
    offset = tasks.task_definition("T2").unlock_offset_days
    assert statuses(tasks, participant)["T1"] == "done"
    t2 = tasks.status_of(participant, "T2")
    assert t2["status"] == "locked"
    assert t2["available_at"] == (t1.completed_at + timedelta(days=offset)).isoformat(timespec="seconds") + "Z"

    clock.set(t1.completed_at + timedelta(days=offset))
    assert tasks.status_of(participant, "T2")["status"] == "available"
    assert tasks.status_of(participant, "T2")["overdue"] is False
    assert statuses(tasks, participant)["T3"] == "locked"  # T2 is not done yet
    clock.advance(days=tasks.timing.overdue_after_days)
    assert tasks.status_of(participant, "T2")["overdue"] is True


def test_pilot_mode_compresses_unlocking_and_the_visible_countdown(db_session, study, clock, participant):
    tasks = TaskService(db_session, study, time_scale=0.01, clock=clock)
    t1 = do_first_task(tasks, clock, participant)
    offset = tasks.task_definition("T2").unlock_offset_days

    clock.set(t1.completed_at + timedelta(days=offset * 0.01))
    ts = tasks.start(participant, "T2")

    timer = tasks.timer(ts)
    assert timer["remaining_real_seconds"] == pytest.approx(timer["remaining_seconds"] * 0.01)


def test_an_attempt_open_past_the_maximum_wall_time_is_closed_as_abandoned(tasks, participant, clock, ended):
    ts = tasks.start(participant, "T1")
    tasks.commit()
    clock.advance(tasks.timing.max_wall_seconds - 1)
    assert tasks.close_abandoned() == []

    clock.advance(1)
    assert tasks.close_abandoned() == [ts]
    assert (ts.phase, ts.end_reason) == ("questionnaire", "abandoned")
    tasks.commit()
    assert ended == [ts.id]


def test_a_running_session_past_the_wall_time_is_closed_even_though_the_request_is_refused(tasks, participant,
                                                                                            clock, db_session):
    tasks.start(participant, "T1")
    clock.advance(tasks.timing.max_wall_seconds)

    with pytest.raises(Conflict) as refused:
        tasks.running_session(participant, "T1", phase="chat")

    assert refused.value.code == "task_phase_questionnaire"
    db_session.expire_all()
    assert tasks.live_session(participant.id, "T1").end_reason == "abandoned"  # committed


def test_no_running_session_names_the_tasks_status(tasks, participant):
    with pytest.raises(Conflict) as refused:
        tasks.running_session(participant, "T1", phase="chat")
    assert refused.value.code == "task_available"


def test_an_admin_reset_voids_the_attempt_keeps_it_and_lets_the_task_start_again(tasks, participant, clock,
                                                                                  db_session):
    admin = create_admin(db_session, "labadmin", "admin-password-1", clock)
    first = tasks.start(participant, "T1")
    with pytest.raises(Conflict) as no_reason:
        tasks.reset(first, admin=admin, reason="  ")
    assert no_reason.value.code == "reason_required" and first.status == "in_progress"

    tasks.reset(first, admin=admin, reason="browser crashed")
    second = tasks.start(participant, "T1")

    assert (first.status, first.phase, first.reset_reason) == ("reset", "closed", "browser crashed")
    assert second.attempt == 2 and tasks.live_session(participant.id, "T1").id == second.id
    assert [s.id for s in tasks.sessions_of(participant.id)] == [first.id, second.id]
    audit = db_session.scalar(select(AuditLog).where(AuditLog.action == "task_reset"))
    assert audit.details == {"task_id": "T1", "attempt": 1, "reason": "browser crashed"}


def test_the_overview_reads_the_attempt_that_counts_for_every_task_in_one_query(tasks, participant, clock,
                                                                                db_session):
    from sqlalchemy import event

    admin = create_admin(db_session, "labadmin", "admin-password-1", clock)
    first = tasks.start(participant, "T1")
    tasks.reset(first, admin=admin, reason="browser crashed")
    second = do_first_task(tasks, clock, participant)
    clock.advance(days=30)
    third = tasks.start(participant, "T2")
    tasks.commit()

    live = tasks.live_sessions(participant.id)
    assert {task: ts.id for task, ts in live.items()} == {"T1": second.id, "T2": third.id}  # the reset one is not
    assert all(tasks.live_session(participant.id, task).id == ts.id for task, ts in live.items())
    statements = []
    listener = lambda *args: statements.append(args[2])  # noqa: E731 - before_cursor_execute's statement
    engine = db_session.get_bind()
    event.listen(engine, "before_cursor_execute", listener)
    try:
        overview = tasks.overview(participant)
    finally:
        event.remove(engine, "before_cursor_execute", listener)
    assert [t["status"] for t in overview][:3] == ["done", "in_progress", "locked"]
    assert len(statements) == 1  # not one per task: every task request builds this overview


def test_a_completed_task_cannot_be_reset(tasks, participant, clock, db_session):
    admin = create_admin(db_session, "labadmin", "admin-password-1", clock)
    ts = do_first_task(tasks, clock, participant)
    with pytest.raises(Conflict) as refused:
        tasks.reset(ts, admin=admin, reason="mistake")
    assert refused.value.code == "task_done" and ts.status == "done"


def test_a_withdrawn_participant_can_start_nothing_and_sees_everything_open_locked(tasks, participant, clock):
    do_first_task(tasks, clock, participant)
    participant.status = "withdrawn"
    clock.advance(days=30)

    with pytest.raises(Forbidden) as refused:
        tasks.start(participant, "T2")

    assert refused.value.code == "withdrawn"
    assert set(list(statuses(tasks, participant).values())[1:]) == {"locked"}
    assert statuses(tasks, participant)["T1"] == "done"  # finished work stays visible


def test_the_timer_reports_time_left_as_of_now_counting_the_time_since_the_last_action(tasks, participant, clock):
    """A reload 40 s after the last message must not show the time as of that message (issue 20, item 2)."""
    ts = tasks.start(participant, "T1")
    clock.advance(30)
    tasks.touch(ts)
    clock.advance(40)  # no action since: the page is open, the participant reads or types

    timer = tasks.timer(ts)
    assert timer["active_seconds"] == pytest.approx(70)
    assert timer["remaining_seconds"] == pytest.approx(tasks.timing.task_active_seconds - 70)
    assert ts.active_seconds == pytest.approx(30)  # reading the timer credits nothing

    tasks.touch(ts)  # the next heartbeat takes nothing back
    assert tasks.timer(ts)["remaining_seconds"] == pytest.approx(timer["remaining_seconds"])


def test_the_timer_as_of_now_leaves_out_a_gap_longer_than_the_idle_threshold(tasks, participant, clock):
    ts = tasks.start(participant, "T1")
    clock.advance(30)
    tasks.touch(ts)
    clock.advance(tasks.timing.idle_gap_seconds)
    assert tasks.timer(ts)["active_seconds"] == pytest.approx(30 + tasks.timing.idle_gap_seconds)
    clock.advance(1)  # now an idle gap: the next action will credit none of it, so neither does the timer

    assert tasks.timer(ts)["active_seconds"] == pytest.approx(30)
    tasks.touch(ts)
    assert tasks.timer(ts)["active_seconds"] == pytest.approx(30)


def test_the_timer_as_of_now_shows_time_up_and_the_minimum_reached_before_the_next_action(tasks, participant,
                                                                                           clock):
    ts = tasks.start(participant, "T1")
    chat_for(tasks, clock, ts, tasks.timing.task_active_seconds - 10)
    clock.advance(20)

    timer = tasks.timer(ts)
    assert (timer["remaining_seconds"], timer["time_up"], timer["can_finish"]) == (0, True, True)
    assert timer["active_seconds"] == tasks.timing.task_active_seconds


def test_a_locked_task_says_why_the_previous_task_or_the_unlock_time(tasks, participant, clock):
    """The page names the real reason (issue 20, item 4): "finish the previous task" only while it is not done."""
    overview = {t["id"]: t for t in tasks.overview(participant)}
    assert overview["T2"]["locked_reason"] == "previous_task"
    t1 = do_first_task(tasks, clock, participant)
    overview = {t["id"]: t for t in tasks.overview(participant)}
    assert (overview["T2"]["status"], overview["T2"]["locked_reason"]) == ("locked", "opens_at")
    assert overview["T3"]["locked_reason"] == "previous_task"
    clock.set(t1.completed_at + timedelta(days=tasks.study.task("T2").unlock_offset_days))
    assert "locked_reason" not in {t["id"]: t for t in tasks.overview(participant)}["T2"]
    participant.status = "withdrawn"
    assert {t["locked_reason"] for t in tasks.overview(participant) if t["status"] == "locked"} == {"withdrawn"}
