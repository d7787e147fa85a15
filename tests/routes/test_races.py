"""Issue 11, item 2: simultaneous requests end with exactly one winner and a 409 for the rest, and the
database itself (unique indexes) holds the line, on SQLite and on PostgreSQL.

Each test lines the requests up with a barrier placed just after their check-then-act read (all of them
see "not started / not answered / name free"), so the race is certain to happen, not left to timing.
"""
from __future__ import annotations

import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest
from sqlalchemy import delete, func, select

from database.models import Message, QuestionnaireResponse, TaskSession, User
from tests.conftest import ApiClient, answer_for

pytestmark = pytest.mark.postgres


class FirstCallBarrier:
    """Wraps a function so each thread's first call waits, after running it, until ``parties`` threads
    have made theirs (or 3 s passed: code that serialises the callers must not hang the test)."""

    def __init__(self, parties: int) -> None:
        self.barrier = threading.Barrier(parties, timeout=3)
        self.seen = threading.local()

    def wrap(self, function):
        def waiting(*args, **kwargs):
            result = function(*args, **kwargs)
            if not getattr(self.seen, "done", False):
                self.seen.done = True
                try:
                    self.barrier.wait()
                except threading.BrokenBarrierError:
                    pass
            return result
        return waiting


def clones(app, api: ApiClient, n: int) -> list[ApiClient]:
    """``n`` clients carrying the same login cookie, as when one cookie is sent from several tabs."""
    cookie = api.raw.get_cookie("session").value
    copies = []
    for _ in range(n):
        copy = ApiClient(app.test_client())
        copy.raw.set_cookie("session", cookie)
        copy.token = api.csrf()
        copies.append(copy)
    return copies


def at_once(calls) -> list:
    with ThreadPoolExecutor(len(calls)) as pool:
        return [f.result(timeout=60) for f in [pool.submit(call) for call in calls]]


def count(app, model, *where) -> int:
    with app.extensions["memory_lab"].db.Session() as session:
        return session.scalar(select(func.count(model.id)).where(*where))


def test_simultaneous_task_starts_make_one_attempt(app, make_participant, monkeypatch):
    from services.timer_service import TaskService

    api = make_participant("starter")
    api.get("/api/tasks")
    gate = FirstCallBarrier(5)
    monkeypatch.setattr(TaskService, "status_of", gate.wrap(TaskService.status_of))
    responses = at_once([lambda c=c: c.post("/api/tasks/T1/start") for c in clones(app, api, 5)])
    statuses = Counter(r.status_code for r in responses)
    assert statuses == {201: 1, 409: 4}, [r.get_json() for r in responses]
    assert {r.get_json()["error"] for r in responses if r.status_code == 409} <= {"task_already_started"}
    assert count(app, TaskSession) == 1
    assert api.post("/api/tasks/T1/start").status_code == 201  # afterwards, reopening resumes the one attempt
    assert count(app, TaskSession) == 1


def test_simultaneous_retries_of_one_message_store_one_reply(app, make_participant, clock, monkeypatch):
    from routes import participant

    api = make_participant("retrier")
    api.post("/api/tasks/T1/start")
    clock.advance(5)
    message_id = api.post("/api/tasks/T1/messages", json={"content": "记住我喜欢爬山"}).get_json()["message"]["id"]
    with app.extensions["memory_lab"].db.session() as session:  # as if the reply had failed
        session.execute(delete(Message).where(Message.reply_to_id == message_id))
    gate = FirstCallBarrier(4)
    monkeypatch.setattr(participant.chat_service, "unanswered_message",
                        gate.wrap(participant.chat_service.unanswered_message))
    responses = at_once([lambda c=c: c.post(f"/api/tasks/T1/messages/{message_id}/reply")
                         for c in clones(app, api, 4)])
    statuses = Counter(r.status_code for r in responses)
    assert statuses == {201: 1, 409: 3}, [r.get_json() for r in responses]
    assert {r.get_json()["error"] for r in responses if r.status_code == 409} == {"already_answered"}
    assert count(app, Message, Message.reply_to_id == message_id) == 1


def test_names_differing_in_case_registered_at_once_make_one_account(app, monkeypatch):
    from services import account_service

    gate = FirstCallBarrier(3)
    monkeypatch.setattr(account_service, "hash_password", gate.wrap(account_service.hash_password))
    clients = [ApiClient(app.test_client()) for _ in range(3)]
    for c in clients:
        c.csrf()
    responses = at_once([lambda c=c, n=n: c.register(n) for c, n in zip(clients, ["name", "NAME", "Name"],
                                                                         strict=True)])
    statuses = Counter(r.status_code for r in responses)
    assert statuses == {201: 1, 409: 2}, [r.get_json() for r in responses]
    assert {r.get_json()["error"] for r in responses if r.status_code == 409} == {"username_taken"}
    assert count(app, User) == 1


def test_simultaneous_questionnaire_posts_store_one_set_of_answers(app, make_participant, clock, study,
                                                                   monkeypatch):
    from routes import participant

    api = make_participant("answerer")
    api.post("/api/tasks/T1/start")
    clock.advance(5)
    api.post("/api/tasks/T1/messages", json={"content": "hello"})
    while api.post("/api/tasks/T1/finish").status_code != 200:
        clock.advance(study.timing.idle_gap_seconds - 1)
    items = api.get("/api/tasks/T1/questionnaire").get_json()["items"]
    answers = {i["id"]: answer_for(i) for i in items}
    gate = FirstCallBarrier(3)
    monkeypatch.setattr(participant, "validate_answers", gate.wrap(participant.validate_answers))
    responses = at_once([lambda c=c: c.post("/api/tasks/T1/questionnaire", json={"answers": answers})
                         for c in clones(app, api, 3)])
    statuses = Counter(r.status_code for r in responses)
    assert statuses == {201: 1, 409: 2}, [r.get_json() for r in responses]
    assert count(app, QuestionnaireResponse) == len(answers)


def test_the_database_refuses_a_second_live_attempt_and_a_second_reply(app, make_participant, clock):
    """The constraints themselves, without the services' checks in front of them."""
    from sqlalchemy.exc import IntegrityError

    api = make_participant("direct")
    api.post("/api/tasks/T1/start")
    clock.advance(5)
    api.post("/api/tasks/T1/messages", json={"content": "hi"})
    runtime = app.extensions["memory_lab"]
    with runtime.db.Session() as session:
        ts = session.scalar(select(TaskSession))
        reply = session.scalar(select(Message).where(Message.role == "assistant"))
        session.add(TaskSession(user_id=ts.user_id, task_id="T1", attempt=2, status="in_progress", phase="chat",
                                started_at=ts.started_at, last_activity_at=ts.started_at, active_seconds=0.0))
        with pytest.raises(IntegrityError):
            session.flush()
        session.rollback()
        session.add(Message(user_id=reply.user_id, task_session_id=reply.task_session_id, task_id="T1",
                            role="assistant", content="again", created_at=reply.created_at,
                            reply_to_id=reply.reply_to_id))
        with pytest.raises(IntegrityError):
            session.flush()
        session.rollback()
        session.add(User(username="DIRECT", password_hash="x", role="participant", language="zh",
                         created_at=reply.created_at, status="active"))
        with pytest.raises(IntegrityError):
            session.flush()
