"""Issue 11, item 2: simultaneous requests end with exactly one winner and a 409 for the rest, and the
database itself (unique indexes) holds the line, on SQLite and on PostgreSQL.

Each test lines the requests up with a barrier placed just after their check-then-act read (all of them
see "not started / not answered / name free"), so the race is certain to happen, not left to timing.
"""
from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import httpx
import pytest
from sqlalchemy import delete, func, select
from werkzeug.serving import make_server

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
    from services.study.timer_service import TaskService

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
    # the first retry claims the reply (issue 28 item 13); one arriving after it stored the reply: answered
    assert {r.get_json()["error"] for r in responses if r.status_code == 409} <= {"reply_in_progress",
                                                                                    "already_answered"}
    assert count(app, Message, Message.reply_to_id == message_id) == 1


def test_names_differing_in_case_registered_at_once_make_one_account(app, monkeypatch):
    from services.participants import account_service

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


# ---------------------------------------------------------------------------------------------------------
# Issue 19, items 9 and 10: erasure against itself and against the participant's own requests, over real
# HTTP (a threaded server on 127.0.0.1, one thread per request), so every request runs in its own thread
# with its own database connection, as under `make serve`.
# ---------------------------------------------------------------------------------------------------------

ERASE_BODY = {"confirm": True, "reason": "asked to be erased"}
# what a participant's request may answer while their data is being erased: done before the erasure,
# refused as a conflict (task state), session ended (401) or gone (410); never a server error
PARTICIPANT_ANSWERS = {200, 201, 401, 409, 410}


@contextmanager
def served(app) -> Iterator[str]:
    server = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, name="served-app", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        thread.join(timeout=10)
        server.server_close()


class Http:
    """A browser-like client of the served app: keeps its cookie and sends the CSRF token with each POST."""

    def __init__(self, base: str, cookies: httpx.Cookies | None = None, token: str | None = None) -> None:
        self.client = httpx.Client(base_url=base, timeout=60, cookies=cookies)
        self.token = token

    def csrf(self) -> str:
        if self.token is None:
            self.token = self.client.get("/api/auth/csrf").json()["csrf_token"]
        return self.token

    def get(self, path: str) -> httpx.Response:
        return self.client.get(path)

    def post(self, path: str, json=None) -> httpx.Response:
        response = self.client.post(path, json=json, headers={"X-CSRFToken": self.csrf()})
        body = response.json() if response.headers.get("content-type", "").startswith("application/json") else {}
        if isinstance(body, dict) and body.get("csrf_token"):
            self.token = body["csrf_token"]
        return response

    def clones(self, n: int) -> list[Http]:
        """``n`` clients sending this one's cookie, as several tabs of one browser do."""
        return [Http(str(self.client.base_url), cookies=httpx.Cookies(self.client.cookies), token=self.csrf())
                for _ in range(n)]

    def close(self) -> None:
        self.client.close()


def _admin(app, base: str) -> Http:
    from services.participants.account_service import create_admin
    from tests.conftest import ADMIN_PASSWORD

    runtime = app.extensions["memory_lab"]
    with runtime.db.Session() as session:
        create_admin(session, "raceadmin", ADMIN_PASSWORD, runtime.clock)
    admin = Http(base)
    assert admin.post("/api/auth/login", json={"username": "raceadmin", "password": ADMIN_PASSWORD}).status_code == 200
    return admin


def _participant(base: str, name: str) -> tuple[Http, int]:
    api = Http(base)
    response = api.post("/api/auth/register", json={"username": name, "password": "correct-horse-1", "consent": True})
    assert response.status_code == 201, response.text
    return api, response.json()["user"]["id"]


def all_at_once(calls, *, timeout: float = 60) -> list:
    """Run the calls in their own threads, released together by a barrier."""
    barrier = threading.Barrier(len(calls), timeout=timeout)

    def released(call):
        barrier.wait()
        return call()

    with ThreadPoolExecutor(len(calls)) as pool:
        futures = [pool.submit(released, call) for call in calls]
        return [f.result(timeout=timeout) for f in futures]


def leftovers(app, user_id: int) -> dict[str, int]:
    """Rows still belonging to ``user_id``, in every table the models declare with a ``user_id`` (so a table
    added later is checked too) except the tombstone's own (users, assignments, audit_log)."""
    from database.models import Base
    from services.participants.erasure_service import KEPT_TABLES

    found = {}
    with app.extensions["memory_lab"].db.engine.connect() as conn:
        for table in Base.metadata.sorted_tables:
            if "user_id" in table.c and table.name not in KEPT_TABLES:
                n = conn.execute(select(func.count()).select_from(table).where(table.c.user_id == user_id)).scalar()
                if n:
                    found[table.name] = n
    return found


def test_simultaneous_erasures_erase_once_and_refuse_the_rest(app):
    """Six admins' erase calls at the same moment: one erasure, one audit row, five clear 409s."""
    from database.models import AuditLog

    with served(app) as base:
        admin = _admin(app, base)
        participant, user_id = _participant(base, "erase-me-once")
        assert participant.post("/api/tasks/T1/start").status_code == 201
        admins = admin.clones(6)
        responses = all_at_once([lambda a=a: a.post(f"/api/admin/participants/{user_id}/erase", json=ERASE_BODY)
                                 for a in admins])
    statuses = Counter(r.status_code for r in responses)
    assert statuses == {200: 1, 409: 5}, [r.text for r in responses]
    assert {r.json()["error"] for r in responses if r.status_code == 409} == {"already_erased"}
    assert count(app, AuditLog, AuditLog.action == "participant_erased", AuditLog.target_user_id == user_id) == 1
    assert leftovers(app, user_id) == {}


def _race_trial(app, base: str, admin: Http, trial: int) -> tuple[list[httpx.Response], int]:
    """One participant, then at once: the erasure and that participant's own requests. Trials alternate
    between a participant chatting (messages and return links) and one starting the task."""
    participant, user_id = _participant(base, f"racer{trial:02d}")
    chatting = trial % 2 == 0
    if chatting:
        assert participant.post("/api/tasks/T1/start").status_code == 201
        first = participant.post("/api/tasks/T1/messages", json={"content": f"第{trial}次：我住在梧桐巷"})
        assert first.status_code == 201, first.text
    tabs = participant.clones(6)
    if chatting:
        own = [lambda t=t, i=i: t.post("/api/tasks/T1/messages", json={"content": f"消息{i}：我对花生过敏"})
               for i, t in enumerate(tabs[:2])]
        own += [lambda t=tabs[2]: t.post("/api/tasks/T1/messages?stream=1", json={"content": "流式：我叫小梧"}),
                lambda t=tabs[3]: t.post("/api/tasks/T1/heartbeat")]
    else:
        own = [lambda t=t: t.post("/api/tasks/T1/start") for t in tabs[:4]]
    own += [lambda t=t: t.get("/api/me/return-link") for t in tabs[4:]]
    responses = all_at_once([lambda: admin.post(f"/api/admin/participants/{user_id}/erase", json=ERASE_BODY), *own])
    for tab in [participant, *tabs]:
        tab.close()
    return responses, user_id


def _complete(response: httpx.Response) -> bool:
    """A streamed reply ends with its reply or an error event (a stream cut by a server error has neither);
    an error it reports is the erasure's, nothing else."""
    if not response.headers.get("content-type", "").startswith("text/event-stream"):
        return True
    if "event: reply" in response.text:
        return True
    return "event: error" in response.text and "participant_erased" in response.text


def test_erasure_racing_the_participants_own_requests_leaves_nothing_and_answers_them_cleanly(app):
    """Erasure excludes the participant's requests: each trial's erasure succeeds, the participant's
    in-flight requests (messages, a streamed message, a heartbeat, task starts, return links) answer 2xx
    (done before), 401, 409 or 410 (never 500; a stream ends with its reply or a participant_erased
    event), and afterwards no table holds a row of theirs. Bounded: 8 trials of 7 requests each."""
    runtime = app.extensions["memory_lab"]
    problems = []
    with served(app) as base:
        admin = _admin(app, base)
        for trial in range(8):
            (erase, *own), user_id = _race_trial(app, base, admin, trial)
            if erase.status_code != 200:
                problems.append(f"trial {trial}: erase answered {erase.status_code} {erase.text[:200]}")
            bad = [f"{r.request.method} {r.request.url.path} -> {r.status_code} {r.text[:120]}"
                   for r in own if r.status_code not in PARTICIPANT_ANSWERS or not _complete(r)]
            if bad:
                problems.append(f"trial {trial}: {bad}")
            left = leftovers(app, user_id)
            if left:
                problems.append(f"trial {trial}: rows left for the erased participant: {left}")
            with runtime.db.Session() as session:
                status = session.get(User, user_id).status
            if status != "erased":
                problems.append(f"trial {trial}: participant is {status}")
    assert problems == []
