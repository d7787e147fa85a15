"""admin_service at the service level: the monitor and its filters, one participant's record,
withdrawal and task reset (audited), the failure log and usage."""
from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import select

from database.models import AuditLog, Message, ProviderFailure, User
from services.operations import admin_service
from services.participants.account_service import create_admin, register
from services.platform.errors import BadInput, Conflict, NotFound
from services.study.timer_service import TaskService


@pytest.fixture
def tasks(db_session, study, clock) -> TaskService:
    return TaskService(db_session, study, time_scale=1.0, clock=clock)


@pytest.fixture
def admin(db_session, clock) -> User:
    return create_admin(db_session, "labadmin", "admin-password-1", clock)


@pytest.fixture
def people(db_session, study, clock) -> list[User]:
    return [register(db_session, username=f"person_{n}", password="correct-horse-1", consent=True, language="zh",
                     study=study, clock=clock, seed=11) for n in range(3)]


def reply(session, ts, clock, *, provider: str, tokens: tuple[int, int], latency_ms: float) -> Message:
    question = Message(user_id=ts.user_id, task_session_id=ts.id, task_id=ts.task_id, role="user",
                       content="你好", created_at=clock.now())
    session.add(question)
    session.flush()
    answer = Message(user_id=ts.user_id, task_session_id=ts.id, task_id=ts.task_id, role="assistant",
                     content="你好！", created_at=clock.now(), reply_to_id=question.id, provider=provider,
                     model=f"{provider}-model", prompt_tokens=tokens[0], completion_tokens=tokens[1],
                     latency_ms=latency_ms, params={})
    session.add(answer)
    session.flush()
    return answer


def failure(session, clock, *, provider: str, purpose: str = "reply", user_id: int | None = None,
            seconds: float = 0.0) -> None:
    session.add(ProviderFailure(at=clock.now() + timedelta(seconds=seconds), provider=provider, model="m",
                                purpose=purpose, error_class="timeout", message="timed out", user_id=user_id,
                                fallback_provider="offline", try_number=2, action="retry", retry_in_s=1.5))


# -- monitor ---------------------------------------------------------------------------------------


def test_the_monitor_lists_participants_only_with_their_tasks_and_counts(db_session, tasks, admin, people, clock):
    ts = tasks.start(people[0], "T1")
    reply(db_session, ts, clock, provider="offline", tokens=(10, 5), latency_ms=3.0)
    failure(db_session, clock, provider="dashscope", user_id=people[0].id)
    db_session.commit()

    rows = admin_service.monitor_rows(db_session, tasks)

    assert [r["id"] for r in rows] == [p.id for p in people]  # the admin is not a participant
    first = rows[0]
    assert first["tasks"]["T1"] == "in_progress" and rows[1]["tasks"]["T1"] == "available"
    assert (first["messages"], first["provider_failures"], first["questionnaires_done"]) == (2, 1, 0)
    assert first["consolidation_pending"] == 0  # a chat still running is not pending yet
    assert first["overdue"] is False


def test_filters_pick_by_group_status_and_overdue(db_session, tasks, people, clock, study):
    people[1].status = "withdrawn"
    db_session.commit()
    rows = admin_service.monitor_rows(db_session, tasks)
    group = people[0].memory_group

    by_group = admin_service.filter_rows(rows, study, group=group)
    assert {r["id"] for r in by_group} == {p.id for p in people if p.memory_group == group}
    assert [r["id"] for r in admin_service.filter_rows(rows, study, status="withdrawn")] == [people[1].id]
    assert admin_service.filter_rows(rows, study, overdue="1") == []
    assert len(admin_service.filter_rows(rows, study, overdue="0")) == 3

    clock.advance(days=tasks.timing.overdue_after_days + 1)
    late = admin_service.filter_rows(admin_service.monitor_rows(db_session, tasks), study, overdue="yes")
    assert {r["id"] for r in late} == {people[0].id, people[2].id}  # a withdrawn participant is never overdue


@pytest.mark.parametrize("bad", [{"group": "no-such-group"}, {"status": "gone"}, {"overdue": "maybe"}])
def test_a_bad_filter_is_refused_naming_it(db_session, tasks, people, study, bad):
    rows = admin_service.monitor_rows(db_session, tasks)
    with pytest.raises(BadInput) as refused:
        admin_service.filter_rows(rows, study, **bad)
    assert refused.value.code == "invalid_filter" and refused.value.details == bad


def test_the_summary_lists_every_enabled_group_and_the_funnel(db_session, tasks, people, study):
    summary = admin_service.monitor_summary(admin_service.monitor_rows(db_session, tasks), study)

    assert set(summary["groups"]) >= set(study.enabled_conditions)
    assert sum(summary["groups"].values()) == 3
    assert summary["funnel"] == {"registered": 3, **{t.id: 0 for t in study.tasks}}
    assert summary["statuses"] == {"active": 3, "completed": 0, "withdrawn": 0, "erased": 0}


# -- one participant ----------------------------------------------------------------------------------


def test_the_record_of_an_unknown_id_or_an_admin_is_not_found(db_session, tasks, admin):
    for user_id in (admin.id, 9999):
        with pytest.raises(NotFound) as missing:
            admin_service.participant_record(db_session, tasks, user_id)
        assert missing.value.code == "unknown_participant"


def test_a_participants_record_holds_sessions_messages_failures_and_audit(db_session, tasks, admin, people, clock):
    ts = tasks.start(people[0], "T1")
    answer = reply(db_session, ts, clock, provider="offline", tokens=(10, 5), latency_ms=3.0)
    failure(db_session, clock, provider="dashscope", user_id=people[0].id)
    admin_service.reset_task(db_session, tasks, people[0].id, "T1", admin=admin, reason="stuck page")
    db_session.commit()

    record = admin_service.participant_record(db_session, tasks, people[0].id)

    assert record["participant"]["participant_code"] == people[0].participant_code
    assert [(s["task_id"], s["status"]) for s in record["task_sessions"]] == [("T1", "reset")]
    assert [m["id"] for m in record["messages"]][-1] == answer.id
    assert record["messages"][-1]["provider"] == "offline"  # the admin view shows who wrote each reply
    assert [f["provider"] for f in record["provider_failures"]] == ["dashscope"]
    assert [a["action"] for a in record["audit"]] == ["assignment", "task_reset"]  # the draw is audited too


# -- actions -------------------------------------------------------------------------------------------


def test_withdrawal_keeps_the_account_marks_it_and_is_audited(db_session, admin, people, clock):
    user = admin_service.withdraw(db_session, people[0].id, admin=admin, reason="  asked by email ",
                                  now=clock.now())
    db_session.commit()

    assert (user.status, user.withdrawn_at, user.withdrawn_reason) == ("withdrawn", clock.now(), "asked by email")
    audit = db_session.scalar(select(AuditLog).where(AuditLog.action == "participant_withdrawn"))
    assert (audit.actor_user_id, audit.target_user_id) == (admin.id, user.id)
    assert audit.details == {"reason": "asked by email", "participant_code": user.participant_code}
    with pytest.raises(Conflict) as again:
        admin_service.withdraw(db_session, people[0].id, admin=admin, reason=None, now=clock.now())
    assert again.value.code == "already_withdrawn"


@pytest.mark.parametrize(("reason", "code"), [(42, "reason_required"), ("x" * 2001, "reason_too_long")])
def test_withdrawal_with_a_bad_reason_changes_nothing(db_session, admin, people, clock, reason, code):
    with pytest.raises(BadInput) as refused:
        admin_service.withdraw(db_session, people[0].id, admin=admin, reason=reason, now=clock.now())
    assert refused.value.code == code
    assert db_session.get(User, people[0].id).status == "active"


def test_withdrawing_an_admin_is_not_found(db_session, admin, clock):
    with pytest.raises(NotFound):
        admin_service.withdraw(db_session, admin.id, admin=admin, reason=None, now=clock.now())


@pytest.mark.parametrize(("task_id", "reason", "error", "code"), [
    ("T1", None, BadInput, "reason_required"),
    ("T1", "   ", BadInput, "reason_required"),
    ("T2", "stuck", Conflict, "task_not_started"),
    ("T9", "stuck", NotFound, "unknown_task"),
])
def test_a_reset_needs_a_reason_and_a_started_task(db_session, tasks, admin, people, task_id, reason, error, code):
    ts = tasks.start(people[0], "T1")
    with pytest.raises(error) as refused:
        admin_service.reset_task(db_session, tasks, people[0].id, task_id, admin=admin, reason=reason)
    assert refused.value.code == code
    assert ts.status == "in_progress"


def test_pending_consolidation_lists_closed_chats_oldest_first(db_session, tasks, people, clock, study):
    running = tasks.start(people[0], "T1")
    closed = []
    for person in people[1:]:
        ts = tasks.start(person, "T1")
        clock.advance(tasks.timing.max_wall_seconds)
        tasks.expire_if_abandoned(ts)
        closed.append(ts.id)
    db_session.commit()

    assert admin_service.pending_consolidation(db_session) == closed
    assert admin_service.pending_consolidation(db_session, user_id=people[2].id) == closed[1:]
    assert running.id not in admin_service.pending_consolidation(db_session, user_id=people[0].id)


# -- failures and usage ------------------------------------------------------------------------------------


def test_the_failure_log_is_newest_first_with_a_reply_failure_rate_per_provider(db_session, tasks, people, clock):
    ts = tasks.start(people[0], "T1")
    for _ in range(3):
        reply(db_session, ts, clock, provider="dashscope", tokens=(100, 20), latency_ms=500.0)
    failure(db_session, clock, provider="dashscope", user_id=people[0].id, seconds=1)
    failure(db_session, clock, provider="dashscope", purpose="consolidation", seconds=2)
    db_session.commit()

    log = admin_service.failure_log(db_session)

    assert log["total"] == 2
    assert [f["purpose"] for f in log["failures"]] == ["consolidation", "reply"]
    assert log["failures"][1]["participant_code"] == people[0].participant_code
    # the try as facts beside the provider's text: the console words them in the admin's language
    assert {k: log["failures"][1][k] for k in ("message", "try", "action", "retry_in_s")} == {
        "message": "timed out", "try": 2, "action": "retry", "retry_in_s": 1.5}
    [dashscope] = log["by_provider"]
    assert (dashscope["replies"], dashscope["failures"], dashscope["prompt_tokens"]) == (3, 2, 300)
    assert dashscope["reply_failure_rate"] == 0.25  # 1 failed reply out of 4 tries
    assert admin_service.failure_log(db_session, limit=1)["total"] == 2


def test_usage_sums_tokens_and_latency_per_model_and_participant(db_session, tasks, people, clock):
    first, second = tasks.start(people[0], "T1"), tasks.start(people[1], "T1")
    reply(db_session, first, clock, provider="dashscope", tokens=(100, 20), latency_ms=400.0)
    reply(db_session, first, clock, provider="offline", tokens=(10, 5), latency_ms=2.0)
    reply(db_session, second, clock, provider="dashscope", tokens=(50, 10), latency_ms=600.0)
    db_session.commit()

    usage = admin_service.usage(db_session)

    by_model = {row["provider"]: row for row in usage["by_provider"]}
    assert (by_model["dashscope"]["replies"], by_model["dashscope"]["total_tokens"]) == (2, 180)
    assert by_model["dashscope"]["latency_ms_mean"] == 500.0
    by_person = {row["user_id"]: row for row in usage["by_participant"]}
    assert by_person[people[0].id]["total_tokens"] == 135 and by_person[people[1].id]["replies"] == 1
    assert usage["totals"]["replies"] == 3 and usage["totals"]["latency_ms_total"] == 1002.0


def test_usage_of_an_empty_study_is_zero_not_an_error(db_session):
    usage = admin_service.usage(db_session)
    assert usage["totals"]["replies"] == 0 and usage["totals"]["latency_ms_mean"] is None
    assert admin_service.failure_log(db_session) == {"failures": [], "total": 0, "by_provider": []}
