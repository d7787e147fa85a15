"""Failure-log rows: written in their own transaction, even while the caller holds SQLite's write lock."""
from __future__ import annotations

import time
from http import HTTPStatus

from sqlalchemy import select

from database.models import ProviderFailure, User
from services.platform.failure_log import failure_values, make_failure_recorder


def participant(database, clock) -> int:
    with database.session() as session:
        user = User(username="p-failures", password_hash="x", participant_code="P902", created_at=clock.now())
        session.add(user)
        session.flush()
        return user.id


def attempt(**overrides) -> dict:
    return {"provider": "dashscope", "model": "qwen-plus", "ok": False, "error_class": "timeout",
            "error": "APITimeoutError: Request timed out.", "status_code": None, "latency_ms": 500.0,
            "try": 1, "action": "fallback", "retry_in_s": None, "fallback_provider": "openai_compatible",
            "purpose": "reply", "user_id": None, "message_id": None, **overrides}


def rows(database) -> list[ProviderFailure]:
    with database.session() as session:
        return list(session.scalars(select(ProviderFailure).order_by(ProviderFailure.id)))


def test_a_row_survives_the_rollback_of_the_callers_transaction(database, clock):
    user_id = participant(database, clock)
    recorder = make_failure_recorder(database, clock)
    with database.Session() as caller:
        caller.get(User, user_id)
        recorder(attempt(user_id=user_id))
        caller.rollback()

    [row] = rows(database)  # written synchronously: no flush needed when nobody holds the lock
    assert (row.at, row.provider, row.model, row.error_class, row.user_id, row.fallback_provider, row.purpose) == (
        clock.now(), "dashscope", "qwen-plus", "timeout", user_id, "openai_compatible", "reply")
    # the provider's own text, and the try's facts beside it (the admin console words them in its reader's language)
    assert row.message == "APITimeoutError: Request timed out."
    assert (row.try_number, row.action, row.retry_in_s) == (1, "fallback", None)


def test_the_caller_holding_the_write_lock_does_not_stall_the_reply(database, clock):
    user_id = participant(database, clock)
    recorder = make_failure_recorder(database, clock)
    with database.Session() as caller:
        caller.get(User, user_id).last_active_at = clock.now()
        caller.flush()  # on SQLite this connection now holds the database's write lock
        started = time.monotonic()
        recorder(attempt(user_id=user_id, status_code=HTTPStatus.TOO_MANY_REQUESTS, error_class="rate_limited"))
        assert time.monotonic() - started < 2.0
        caller.rollback()

    assert recorder.flush(timeout=10.0)
    [row] = rows(database)
    assert (row.error_class, row.status_code, row.user_id) == ("rate_limited", 429, user_id)


def test_a_row_that_cannot_be_written_is_logged_not_raised(database, clock, caplog):
    recorder = make_failure_recorder(database, clock)
    recorder(attempt(user_id=987654))  # no such participant: the foreign key refuses it
    assert recorder.flush(timeout=5.0)
    assert rows(database) == []
    assert "could not record" in caplog.text


def test_retries_are_stored_as_facts_and_long_values_fit_their_columns(clock):
    values = failure_values(attempt(action="retry", retry_in_s=0.5, error_class="x" * 300, provider="p" * 100,
                                    fallback_provider=None, purpose=None), clock.now())
    assert (values["try_number"], values["action"], values["retry_in_s"]) == (1, "retry", 0.5)
    assert values["message"] == "APITimeoutError: Request timed out."  # no words of ours in the stored text
    assert len(values["error_class"]) == 128 and len(values["provider"]) == 64
    assert values["purpose"] == "reply" and values["fallback_provider"] is None


def test_a_try_reported_without_an_action_gave_up_and_a_failure_outside_a_call_has_no_try(clock):
    assert failure_values(attempt(action=None, **{"try": 2}), clock.now())["action"] == "give_up"
    step = {"provider": "consolidation", "error_class": "StepFailed", "error": "no facts"}  # no provider call
    values = failure_values(step, clock.now())
    assert (values["try_number"], values["action"], values["retry_in_s"], values["message"]) == (
        None, None, None, "no facts")
