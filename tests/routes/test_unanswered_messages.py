"""Every acknowledged message gets its reply: a message stored while the reply could not be made (every
provider down, the database out of connections) is answered 503 with its id and a Retry-After; if the
participant does not ask again, the scheduler's ``answer_unanswered`` answers it a minute later, once,
only while its chat is open, and the page sees the reply at its next heartbeat."""
from __future__ import annotations

import pytest
from sqlalchemy import func, select

from database.models import AuditLog, Message, TaskSession, User
from services.chat.chat_service import ANSWER_GRACE_SECONDS, answer_unanswered
from services.llm.chain import LLMService
from tests.model_doubles import DownModel
from tests.routes.test_chat import sse_events

pytestmark = pytest.mark.postgres


def _replies_to(app, message_id: int) -> int:
    with app.extensions["memory_lab"].db.Session() as session:
        return session.scalar(select(func.count(Message.id)).where(Message.reply_to_id == message_id))


def _model_down(app):
    runtime = app.extensions["memory_lab"]
    working = runtime.llm
    runtime.llm = LLMService([DownModel()], on_failure=runtime.record_failure)
    return lambda: setattr(runtime, "llm", working)


def _failed_message(app, clock, api, text: str, *, stream: bool = False) -> int:
    assert api.post("/api/tasks/T1/start").status_code == 201
    clock.advance(5)
    back_up = _model_down(app)
    if stream:
        events = sse_events(api.post("/api/tasks/T1/messages?stream=1", json={"content": text}))
        name, error = events[-1]
        assert name == "error" and error["error"] == "provider_unavailable"
        assert error["retryable"] is True and error["retry_after_seconds"] >= 1
        message_id = error["message_id"]
    else:
        response = api.post("/api/tasks/T1/messages", json={"content": text})
        body = response.get_json()
        assert response.status_code == 503 and body["error"] == "provider_unavailable"
        # back-pressure: the same wait in the header and the body, for the page and for any HTTP client
        assert int(response.headers["Retry-After"]) == body["details"]["retry_after_seconds"] >= 1
        message_id = body["details"]["message_id"]
    back_up()
    return message_id


def test_a_message_left_without_a_reply_is_answered_once_a_minute_later(app, clock, make_participant):
    api = make_participant("unanswered1")
    message_id = _failed_message(app, clock, api, "我对花生过敏，这周末想去吃火锅。")
    runtime = app.extensions["memory_lab"].for_jobs()
    assert answer_unanswered(runtime)["pending"] == 0  # the page asks again before the grace period ends
    clock.advance(ANSWER_GRACE_SECONDS + 1)
    outcome = answer_unanswered(runtime)
    assert outcome["answered"] == [message_id] and outcome["stopped"] is None
    assert _replies_to(app, message_id) == 1
    with app.extensions["memory_lab"].db.Session() as session:  # the admin sees which replies came late
        note = session.scalars(select(AuditLog).where(AuditLog.action == "late_reply")).one()
    assert note.details["message_id"] == message_id and note.details["waited_seconds"] >= ANSWER_GRACE_SECONDS
    task = api.get("/api/tasks/T1").get_json()["task"]
    reply = task["messages"][-1]
    assert reply["role"] == "assistant" and reply["reply_to_id"] == message_id and reply["content"]
    beat = api.post("/api/tasks/T1/heartbeat").get_json()
    assert beat["last_message_id"] == reply["id"]  # the open page reloads the conversation and shows it
    assert answer_unanswered(runtime)["pending"] == 0
    retry = api.post(f"/api/tasks/T1/messages/{message_id}/reply")
    assert retry.status_code == 409 and retry.get_json()["error"] == "already_answered"
    assert _replies_to(app, message_id) == 1


def test_a_run_while_the_model_is_still_down_stops_and_loses_nothing(app, clock, make_participant):
    api = make_participant("unanswered2")
    message_id = _failed_message(app, clock, api, "I have a dog called Biscuit.", stream=True)
    clock.advance(ANSWER_GRACE_SECONDS + 1)
    back_up = _model_down(app)
    outcome = answer_unanswered(app.extensions["memory_lab"].for_jobs())
    assert outcome["stopped"] == "provider_unavailable" and outcome["answered"] == []
    back_up()
    assert answer_unanswered(app.extensions["memory_lab"].for_jobs())["answered"] == [message_id]


def test_only_open_chats_of_active_participants_are_answered(app, clock, make_participant):
    answered_by_retry = make_participant("unanswered3")
    closed = make_participant("unanswered4")
    withdrawn = make_participant("unanswered5")
    retried = _failed_message(app, clock, answered_by_retry, "我最近在学游泳。")
    assert answered_by_retry.post(f"/api/tasks/T1/messages/{retried}/reply").status_code == 201
    in_closed_chat = _failed_message(app, clock, closed, "我周末要去爬山。")
    of_withdrawn = _failed_message(app, clock, withdrawn, "我在准备考研。")
    with app.extensions["memory_lab"].db.session() as session:
        session.get(TaskSession, session.get(Message, in_closed_chat).task_session_id).phase = "questionnaire"
        session.get(User, session.get(Message, of_withdrawn).user_id).status = "withdrawn"
    clock.advance(ANSWER_GRACE_SECONDS + 1)
    outcome = answer_unanswered(app.extensions["memory_lab"].for_jobs())
    assert outcome["pending"] == 0 and outcome["answered"] == []
    assert [_replies_to(app, m) for m in (retried, in_closed_chat, of_withdrawn)] == [1, 0, 0]
