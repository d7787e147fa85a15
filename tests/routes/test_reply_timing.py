"""Reply timing through the HTTP chat path: chat.reply_pacing holds streamed and JSON replies back (the
message is still stored first, exactly one reply, every token in order), each reply stores its timing,
and memory_exposure records how much of the earlier tasks each reply's context carried, per condition."""
from __future__ import annotations

import json
import time

import pytest
from sqlalchemy import func, select

from database.models import Message
from services.memory.context import memory_exposure
from services.text.tokens import count_tokens
from tests.conftest import walk_task

FLOOR = 0.3  # seconds: short, so the tests stay quick


def sse_events(response):
    events = []
    for block in response.get_data(as_text=True).strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines())
        events.append((lines["event"], json.loads(lines["data"])))
    return events


def _paced(app, pacing):
    runtime = app.extensions["memory_lab"]
    runtime.settings.study = runtime.study.with_overrides({"chat": {"reply_pacing": pacing}})
    return runtime


def _reply(runtime, reply_id):
    with runtime.db.Session() as session:
        return session.get(Message, reply_id)


def test_floor_holds_a_json_reply_and_records_its_timing(app, clock, make_participant):
    runtime = _paced(app, {"mode": "floor", "min_seconds": FLOOR})
    api = make_participant("floorjson")
    api.post("/api/tasks/T1/start")
    clock.advance(5)
    started = time.monotonic()
    response = api.post("/api/tasks/T1/messages", json={"content": "我最近在学做饭。"})
    assert time.monotonic() - started >= FLOOR
    assert response.status_code == 201
    reply = _reply(runtime, response.get_json()["reply"]["id"])
    assert reply.model_first_token_ms == reply.model_total_ms >= 0  # not streamed: the whole answer
    assert reply.pacing_delay_ms > 0
    assert reply.visible_first_token_ms >= FLOOR * 1000
    assert reply.visible_first_token_ms >= reply.model_first_token_ms + reply.pacing_delay_ms
    assert reply.params["pacing"]["mode"] == "floor"
    assert reply.memory_exposure is None  # the first task: nothing earlier to carry


@pytest.mark.postgres
def test_floor_holds_a_streamed_reply_and_delivers_every_token_in_order(app, clock, make_participant):
    runtime = _paced(app, {"mode": "floor", "min_seconds": FLOOR})
    api = make_participant("floorsse")
    api.post("/api/tasks/T1/start")
    clock.advance(5)
    started = time.monotonic()
    response = api.post("/api/tasks/T1/messages?stream=1", json={"content": "I have been learning to cook."})
    events = sse_events(response)  # the test client runs the stream to its end here
    assert time.monotonic() - started >= FLOOR
    names = [name for name, _ in events]
    assert names[0] == "message" and names[-1] == "reply" and names.count("reply") == 1
    deltas = [data["text"] for name, data in events if name == "delta"]
    assert len(deltas) > 1 and "".join(deltas) == events[-1][1]["content"]
    reply = _reply(runtime, events[-1][1]["id"])
    assert reply.content == "".join(deltas)
    assert reply.pacing_delay_ms > 0 and reply.visible_first_token_ms >= FLOOR * 1000
    assert reply.model_total_ms >= reply.model_first_token_ms
    with runtime.db.Session() as session:
        assert session.scalar(select(func.count(Message.id)).where(Message.role == "assistant")) == 1
        user = session.get(Message, events[0][1]["id"])
        assert user.created_at <= reply.created_at  # the message was stored first


def test_a_repeated_key_gets_the_stored_reply_without_a_second_hold(app, clock, make_participant):
    runtime = _paced(app, {"mode": "floor", "min_seconds": FLOOR})
    api = make_participant("floorkey")
    api.post("/api/tasks/T1/start")
    clock.advance(5)
    body = {"content": "再说一次", "idempotency_key": "k-1"}
    first = api.post("/api/tasks/T1/messages", json=body)
    started = time.monotonic()
    again = api.post("/api/tasks/T1/messages", json=body)
    assert time.monotonic() - started < FLOOR  # the stored reply, not a new one held back
    assert again.get_json()["reply"]["id"] == first.get_json()["reply"]["id"]
    with runtime.db.Session() as session:
        assert session.scalar(select(func.count(Message.id)).where(Message.role == "assistant")) == 1


def test_unpaced_replies_record_timing_and_no_delay(app, clock, make_participant):
    runtime = app.extensions["memory_lab"]
    api = make_participant("nopace")
    api.post("/api/tasks/T1/start")
    clock.advance(5)
    reply_id = api.post("/api/tasks/T1/messages", json={"content": "hello"}).get_json()["reply"]["id"]
    reply = _reply(runtime, reply_id)
    assert reply.pacing_delay_ms == 0.0 and reply.params["pacing"]["mode"] == "off"
    assert reply.visible_first_token_ms >= reply.model_first_token_ms >= 0


@pytest.mark.postgres
def test_match_starts_cold_and_says_so(app, clock, make_participant):
    runtime = _paced(app, {"mode": "match", "min_samples": 5})
    api = make_participant("matchcold")
    api.post("/api/tasks/T1/start")
    clock.advance(5)
    reply_id = api.post("/api/tasks/T1/messages?stream=1", json={"content": "hello"})
    reply_id = sse_events(reply_id)[-1][1]["id"]
    reply = _reply(runtime, reply_id)
    assert reply.params["pacing"]["cold_start"] is True
    assert reply.pacing_delay_ms == 0.0  # no samples yet and no floor
    assert set(reply.params["pacing"]["samples"]) == set(runtime.study.enabled_conditions)


T1_LINES = [f"第{i}件事：我喜欢第{i}种水果。" for i in range(1, 10)]


def _exposure_at_t2(app, clock, make_participant, study, group):
    runtime = app.extensions["memory_lab"]
    runtime.settings.study = runtime.study.with_overrides({"enabled_conditions": [group]})
    api = make_participant(f"exp{group}")
    walk_task(api, clock, "T1", T1_LINES, study=study)
    clock.advance(days=2)
    api.post("/api/tasks/T2/start")
    clock.advance(5)
    response = api.post("/api/tasks/T2/messages", json={"content": "你还记得我第三件事说的水果吗？"})
    reply_id = response.get_json()["reply"]["id"]
    with runtime.db.Session() as session:
        reply = session.get(Message, reply_id)
        t1 = session.scalars(select(Message).where(Message.task_id == "T1").order_by(Message.id)).all()
        t1_replies = [m for m in t1 if m.role == "assistant"]
        assert all(m.memory_exposure is None for m in t1_replies)  # T1: no earlier task
        return reply.memory_exposure, reply.memory_context, t1


# The PostgreSQL pass runs L4, whose exposure holds the recent turns, the profile and the recall; each condition's
# memory is loaded and stored there by tests/routes/test_participant_flow.py's four bots.
@pytest.mark.parametrize("group", ["L1", "L2", "L3", pytest.param("L4", marks=pytest.mark.postgres)])
def test_memory_exposure_at_the_start_of_t2(app, clock, make_participant, study, group):
    exposure, context, t1 = _exposure_at_t2(app, clock, make_participant, study, group)
    assert exposure == memory_exposure(context, "T2")
    ids = exposure["earlier_message_ids"]
    assert set(ids) <= {m.id for m in t1}
    turns = study.conditions[group].recent_turns if group != "L1" else 0
    # recent turns: each T1 turn in the window is its participant message and its reply
    window = t1[-2 * turns:] if turns else []
    assert {m.id for m in window} <= set(ids)
    if group == "L1":
        assert exposure == {"earlier_message_ids": [], "profile_present": False, "summary_present": False,
                            "tokens": 0}
    elif group == "L2":  # its 7-turn window at the start of T2 is T1's last 7 turns, verbatim
        assert len(ids) == 14 and not exposure["profile_present"] and not exposure["summary_present"]
        assert exposure["tokens"] == sum(count_tokens(m.content) for m in window)
    else:  # L3/L4: T1's last 3 turns and the gist profile consolidated at T1's end
        assert exposure["profile_present"] and not exposure["summary_present"]
        profile_tokens = count_tokens(context["profile"]["text"])
        assert profile_tokens > 0
        recalled = context["recalled"] if group == "L4" else []
        assert set(ids) == {m.id for m in window} | {r["message_id"] for r in recalled}
        recalled_tokens = sum(count_tokens(r["text"]) + count_tokens(r.get("reply") or "") for r in recalled)
        assert exposure["tokens"] == sum(count_tokens(m.content) for m in window) + profile_tokens + recalled_tokens


@pytest.mark.parametrize("group", ["S1", "R1"])
def test_memory_exposure_of_the_summary_conditions(app, clock, make_participant, study, group):
    exposure, context, t1 = _exposure_at_t2(app, clock, make_participant, study, group)
    assert exposure["summary_present"] and not exposure["profile_present"]
    block = context["summary"] if group == "S1" else context["r1_memory"]
    fragments = context["fragments"] if group == "S1" else []
    assert exposure["earlier_message_ids"] == sorted({f["message_id"] for f in fragments})
    assert set(exposure["earlier_message_ids"]) <= {m.id for m in t1}
    assert exposure["tokens"] == count_tokens(block["text"]) + sum(count_tokens(f["text"]) for f in fragments)


@pytest.mark.postgres
def test_match_holds_a_reply_to_the_shared_distribution(app, clock, make_participant):
    """Warm match: one condition's recent replies came in 1-30 ms, the other's in 300-330 ms. Whichever
    condition this participant is in, the new reply is shown no sooner than the slow condition's lowest
    latency (300 ms): the fast condition is held to the slow one's distribution."""
    runtime = app.extensions["memory_lab"]
    runtime.settings.study = runtime.study.with_overrides({
        "enabled_conditions": ["L1", "L2"], "chat": {"reply_pacing": {"mode": "match", "min_samples": 10}}})
    other = make_participant("matchseed")
    other.post("/api/tasks/T1/start")
    clock.advance(5)
    seeded = other.post("/api/tasks/T1/messages", json={"content": "seed"}).get_json()["message"]
    with runtime.db.session() as session:
        asked = session.get(Message, seeded["id"])
        for group, start in (("L1", 1.0), ("L2", 300.0)):
            for i in range(30):
                session.add(Message(user_id=asked.user_id, task_session_id=asked.task_session_id, task_id="T1",
                                    role="assistant", content="seeded", created_at=clock.now(),
                                    memory_group=group, pacing_delay_ms=0.0, visible_first_token_ms=start + i))
    api = make_participant("matchwarm")
    api.post("/api/tasks/T1/start")
    clock.advance(5)
    started = time.monotonic()
    reply_id = api.post("/api/tasks/T1/messages", json={"content": "hello"}).get_json()["reply"]["id"]
    assert time.monotonic() - started >= 0.3
    reply = _reply(runtime, reply_id)
    assert reply.params["pacing"]["cold_start"] is False
    assert reply.params["pacing"]["samples"]["L1"] >= 30 and reply.params["pacing"]["samples"]["L2"] >= 30
    assert reply.visible_first_token_ms >= 300 and reply.pacing_delay_ms > 0
