"""A resent message is stored once: ``POST .../messages`` takes a client-generated idempotency key
(``Idempotency-Key`` header or ``idempotency_key`` field); a repeat answers with the message stored
first and its reply, and six identical posts at once store one message and one reply."""
from __future__ import annotations

import threading

import pytest
from sqlalchemy import func, select

from database.models import Message
from services.llm.chain import LLMService
from tests.conftest import ApiClient
from tests.model_doubles import DownModel
from tests.routes.test_chat import sse_events

pytestmark = pytest.mark.postgres


def _count(app, role: str) -> int:
    with app.extensions["memory_lab"].db.Session() as session:
        return session.scalar(select(func.count(Message.id)).where(Message.role == role))


@pytest.fixture
def chatting(app, clock, make_participant):
    api = make_participant("resender")
    assert api.post("/api/tasks/T1/start").status_code == 201
    clock.advance(5)
    return api


def test_a_repeat_answers_with_the_stored_message_and_reply(app, chatting):
    first = chatting.post("/api/tasks/T1/messages", json={"content": "我养了一只猫。"},
                          headers={"Idempotency-Key": "3f1c9a2e-0b7d-4c55-9a61-1f2e3d4c5b6a"})
    assert first.status_code == 201
    again = chatting.post("/api/tasks/T1/messages",
                          json={"content": "我养了一只猫。", "idempotency_key": "3f1c9a2e-0b7d-4c55-9a61-1f2e3d4c5b6a"})
    assert again.status_code == 201 and again.headers["Idempotent-Replayed"] == "true"
    assert again.get_json() == first.get_json()
    streamed = sse_events(chatting.post("/api/tasks/T1/messages?stream=1", json={"content": "我养了一只猫。"},
                                        headers={"Idempotency-Key": "3f1c9a2e-0b7d-4c55-9a61-1f2e3d4c5b6a"}))
    assert [name for name, _ in streamed] == ["message", "reply"]
    assert streamed[1][1]["id"] == first.get_json()["reply"]["id"]
    assert _count(app, "user") == 1 and _count(app, "assistant") == 1


def test_a_repeat_after_a_failed_reply_answers_it_once(app, chatting):
    runtime = app.extensions["memory_lab"]
    working = runtime.llm
    runtime.llm = LLMService([DownModel()], on_failure=runtime.record_failure)
    failed = chatting.post("/api/tasks/T1/messages", json={"content": "在吗？", "idempotency_key": "k-1"})
    assert failed.status_code == 503
    runtime.llm = working
    again = chatting.post("/api/tasks/T1/messages", json={"content": "在吗？", "idempotency_key": "k-1"})
    assert again.status_code == 201
    assert again.get_json()["message"]["id"] == failed.get_json()["details"]["message_id"]
    assert _count(app, "user") == 1 and _count(app, "assistant") == 1


def test_keys_are_checked_and_not_reused_for_another_message(app, chatting):
    bad = chatting.post("/api/tasks/T1/messages", json={"content": "hi"}, headers={"Idempotency-Key": "no spaces"})
    assert bad.status_code == 400 and bad.get_json()["error"] == "invalid_idempotency_key"
    differ = chatting.post("/api/tasks/T1/messages", json={"content": "hi", "idempotency_key": "a"},
                           headers={"Idempotency-Key": "b"})
    assert differ.status_code == 400
    assert chatting.post("/api/tasks/T1/messages", json={"content": "hi", "idempotency_key": "k"}).status_code == 201
    reused = chatting.post("/api/tasks/T1/messages", json={"content": "something else", "idempotency_key": "k"})
    assert reused.status_code == 409 and reused.get_json()["error"] == "idempotency_key_reused"
    assert _count(app, "user") == 1


def test_six_identical_posts_at_once_store_one_message_and_one_reply(app, chatting):
    clients = [ApiClient(app.test_client()) for _ in range(6)]
    for api in clients:
        assert api.login("resender", "correct-horse-1").status_code == 200
        api.csrf()
    start = threading.Barrier(len(clients))
    answers: list = []

    def send(api: ApiClient) -> None:
        start.wait()
        response = api.post("/api/tasks/T1/messages", json={"content": "同时发六次。"},
                            headers={"Idempotency-Key": "same-key-6"})
        answers.append((response.status_code, response.get_json()))

    threads = [threading.Thread(target=send, args=(api,)) for api in clients]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert [status for status, _ in answers] == [201] * 6, answers
    assert len({body["message"]["id"] for _, body in answers}) == 1
    assert len({body["reply"]["id"] for _, body in answers}) == 1
    assert _count(app, "user") == 1 and _count(app, "assistant") == 1


@pytest.mark.parametrize("answered", [True, False], ids=["answered", "unanswered"])
def test_a_repeat_after_withdrawal_is_refused_like_a_new_message(app, chatting, answered):
    """Issue 28 item 7: the replay path checks the participant's status and the task's phase."""
    runtime = app.extensions["memory_lab"]
    working = runtime.llm
    if not answered:
        runtime.llm = LLMService([DownModel()], on_failure=runtime.record_failure)
    body = {"content": "我养了一只猫。", "idempotency_key": "k-withdrawn"}
    assert chatting.post("/api/tasks/T1/messages", json=body).status_code == (201 if answered else 503)
    runtime.llm = working
    assert chatting.post("/api/me/withdraw", json={"confirm": True, "erase": False}).status_code == 200
    again = chatting.post("/api/tasks/T1/messages", json=body)
    assert again.status_code == 403 and again.get_json()["error"] == "withdrawn"
    assert _count(app, "assistant") == (1 if answered else 0)  # no reply made for a withdrawn participant


def test_a_repeat_after_the_chat_closed_is_refused_like_a_new_message(app, chatting, clock, study):
    body = {"content": "我养了一只猫。", "idempotency_key": "k-closed"}
    assert chatting.post("/api/tasks/T1/messages", json=body).status_code == 201
    clock.advance(study.timing.min_active_seconds)
    while chatting.post("/api/tasks/T1/finish").status_code != 200:
        clock.advance(study.timing.idle_gap_seconds - 1)
    again = chatting.post("/api/tasks/T1/messages", json=body)
    assert again.status_code == 409 and again.get_json()["error"] == "task_phase_questionnaire"
