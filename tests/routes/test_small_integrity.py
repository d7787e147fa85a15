"""Issue 28 item 13: confusable usernames (a Unicode confusable skeleton), canonical IANA time zones only,
and concurrent manual retries that claim the reply before calling the model."""
from __future__ import annotations

import threading
from collections import Counter

import pytest
from sqlalchemy import delete

from database.models import Message
from services.participants.account_service import username_skeleton
from tests.conftest import ApiClient
from tests.routes.test_races import FirstCallBarrier, at_once, clones, count


@pytest.mark.parametrize("name", ["\u0430dmin", "ADMlN", "erased_x", "erased.P1234", "p\u0430nel-1",
                                  "l\u0430bаdmin"])
def test_names_confusable_with_a_reserved_or_existing_one_are_refused(admin_client, app, name):
    api = ApiClient(app.test_client())
    response = api.register(name)
    assert response.status_code in (400, 409), response.get_json()
    assert response.get_json()["error"] in ("reserved_username", "username_confusable")


@pytest.mark.postgres
def test_a_name_confusable_with_an_existing_participant_is_refused(app, make_participant):
    make_participant("linxiao")
    copy = ApiClient(app.test_client()).register("\u04cfinxia\u043e")  # Cyrillic palochka and o
    assert copy.status_code == 409 and copy.get_json()["error"] == "username_confusable"
    assert ApiClient(app.test_client()).register("lin.xiao2").status_code == 201  # a different name


def test_the_skeleton_folds_lookalikes_and_keeps_different_names_apart():
    assert username_skeleton("\u0430dmin") == username_skeleton("admin") == username_skeleton("ADMIN")
    assert username_skeleton("ad\u217fin") == username_skeleton("admin")  # small roman numeral one thousand
    assert username_skeleton("adrnin") == username_skeleton("admin")
    assert username_skeleton("I1l") == username_skeleton("lll")
    assert username_skeleton("erased_x") == username_skeleton("erased-x")
    assert username_skeleton("alice") != username_skeleton("alina")


@pytest.mark.parametrize(("zone", "accepted"), [
    ("Europe/London", True), ("Asia/Shanghai", True), ("UTC", True), ("Asia/Calcutta", True),
    ("right/UTC", False), ("posix/Asia/Shanghai", False), ("Factory", False), ("localtime", False),
    ("posixrules", False)])
def test_only_canonical_iana_zones_are_accepted(make_participant, zone, accepted):
    api = make_participant()
    response = api.post("/api/me/time-zone", json={"time_zone": zone})
    assert (response.status_code == 200) is accepted, response.get_json()
    if not accepted:
        assert response.get_json()["error"] == "invalid_time_zone"


@pytest.mark.postgres
def test_concurrent_manual_retries_call_the_model_once(app, make_participant, clock, monkeypatch):
    from routes import participant

    runtime = app.extensions["memory_lab"]
    api = make_participant("retrier")
    api.post("/api/tasks/T1/start")
    clock.advance(5)
    message_id = api.post("/api/tasks/T1/messages", json={"content": "记住我喜欢爬山"}).get_json()["message"]["id"]
    with runtime.db.session() as session:  # as if the reply had failed
        session.execute(delete(Message).where(Message.reply_to_id == message_id))
    calls = Counter()
    lock = threading.Lock()
    real = runtime.llm.complete

    def counted(request):
        with lock:
            calls[request.purpose] += 1  # replies; memory upkeep (some conditions) asks the model too
        return real(request)

    monkeypatch.setattr(runtime.llm, "complete", counted)
    gate = FirstCallBarrier(4)
    monkeypatch.setattr(participant.chat_service, "unanswered_message",
                        gate.wrap(participant.chat_service.unanswered_message))
    responses = at_once([lambda c=c: c.post(f"/api/tasks/T1/messages/{message_id}/reply")
                         for c in clones(app, api, 4)])
    statuses = Counter(r.status_code for r in responses)
    assert statuses == {201: 1, 409: 3}, [r.get_json() for r in responses]
    assert calls["reply"] == 1
    assert count(app, Message, Message.reply_to_id == message_id) == 1
    # the claim is given back: a later retry of an unanswered message is not held up by it
    with runtime.db.session() as session:
        session.execute(delete(Message).where(Message.reply_to_id == message_id))
    again = api.post(f"/api/tasks/T1/messages/{message_id}/reply")
    assert again.status_code == 201, again.get_json()
