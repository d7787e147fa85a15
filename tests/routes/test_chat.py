"""Chat: the message is stored first, replies carry their full provenance, failures lose nothing."""
import json

import pytest
from sqlalchemy import func, select

from database.models import Message, ProviderFailure, User
from services.llm.chain import LLMService
from services.llm.providers.offline import OfflineChatProvider
from tests.conftest import ApiClient, walk_task
from tests.model_doubles import DownModel


def build_app(settings, clock, providers):
    from app import create_app

    app = create_app(settings, clock=clock)
    runtime = app.extensions["memory_lab"]
    runtime.llm = LLMService(providers, on_failure=runtime.record_failure)
    return app


def count(app, model, *where):
    app.extensions["memory_lab"].record_failure.flush()  # failure rows may be written by a deferred writer
    with app.extensions["memory_lab"].db.Session() as session:
        return session.scalar(select(func.count(model.id)).where(*where))


def started_participant(app, clock, name="chatter"):
    api = ApiClient(app.test_client())
    assert api.register(name).status_code == 201
    assert api.post("/api/tasks/T1/start").status_code == 201
    clock.advance(5)
    return api


def test_reply_stores_exact_context_prompt_and_provenance(app, clock, make_participant):
    api = make_participant("prov01")
    api.post("/api/tasks/T1/start")
    clock.advance(5)
    first = api.post("/api/tasks/T1/messages", json={"content": "我叫阿明，喜欢爬山。"}).get_json()
    clock.advance(5)
    second = api.post("/api/tasks/T1/messages", json={"content": "周末想去香山。"}).get_json()
    with app.extensions["memory_lab"].db.Session() as session:
        reply = session.get(Message, second["reply"]["id"])
        user = session.scalar(select(User).where(User.username == "prov01"))
        assert reply.reply_to_id == second["message"]["id"]
        assert reply.provider == "offline" and reply.model == "offline-template-responder"
        assert reply.params["is_llm"] is False
        assert reply.prompt_tokens > 0 and reply.completion_tokens > 0 and reply.latency_ms >= 0
        assert reply.memory_group == user.memory_group
        assert reply.memory_context["group"] == user.memory_group
        system = reply.prompt[0]
        assert system["role"] == "system"
        assert app.extensions["memory_lab"].study.system_prompts[user.memory_group]["zh"] in system["content"]
        # the task in progress is ordinary chat history, for every condition
        assert [m["content"] for m in reply.prompt[1:]] == [
            "我叫阿明，喜欢爬山。", first["reply"]["content"], "周末想去香山。"]
        assert reply.attempts[-1]["ok"] is True


def test_a_failing_primary_falls_back_and_is_logged(settings, clock, database):
    dead = DownModel()
    app = build_app(settings, clock, [dead, OfflineChatProvider()])
    api = started_participant(app, clock)
    response = api.post("/api/tasks/T1/messages", json={"content": "hello there"})
    assert response.status_code == 201
    assert dead.calls == 1
    app.extensions["memory_lab"].record_failure.flush()
    with app.extensions["memory_lab"].db.Session() as session:
        reply = session.get(Message, response.get_json()["reply"]["id"])
        assert reply.provider == "offline"
        assert [a["provider"] for a in reply.attempts] == ["unreachable", "offline"]
        failure = session.scalar(select(ProviderFailure))
        assert failure.provider == "unreachable" and failure.fallback_provider == "offline"
        assert failure.user_id == reply.user_id and failure.purpose == "reply"


@pytest.mark.postgres
def test_when_every_provider_fails_the_message_is_kept_and_can_be_answered_later(settings, clock, database):
    dead = DownModel()
    app = build_app(settings, clock, [dead])
    api = started_participant(app, clock)
    response = api.post("/api/tasks/T1/messages", json={"content": "please remember this"})
    assert response.status_code == 503
    body = response.get_json()
    assert body["error"] == "provider_unavailable"
    message_id = body["details"]["message_id"]
    assert count(app, Message, Message.role == "user") == 1
    assert count(app, Message, Message.role == "assistant") == 0
    assert count(app, ProviderFailure) == 1
    task = api.get("/api/tasks/T1").get_json()["task"]
    assert [m["content"] for m in task["messages"]] == ["please remember this"]
    # the provider comes back: the stored message is answered without being sent again
    app.extensions["memory_lab"].llm = LLMService([OfflineChatProvider()])
    retry = api.post(f"/api/tasks/T1/messages/{message_id}/reply")
    assert retry.status_code == 201
    assert retry.get_json()["reply"]["reply_to_id"] == message_id
    assert count(app, Message, Message.role == "user") == 1
    again = api.post(f"/api/tasks/T1/messages/{message_id}/reply")
    assert again.status_code == 409 and again.get_json()["error"] == "already_answered"


def sse_events(response) -> list[tuple[str, dict]]:
    events = []
    for block in response.get_data(as_text=True).strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines())
        events.append((lines["event"], json.loads(lines["data"])))
    return events


def test_streaming_reply_over_sse(app, clock, make_participant):
    api = make_participant("streamer")
    api.post("/api/tasks/T1/start")
    clock.advance(5)
    response = api.post("/api/tasks/T1/messages?stream=1", json={"content": "我最近在准备博士申请，有点焦虑。"})
    assert response.status_code == 200
    assert response.mimetype == "text/event-stream"
    events = sse_events(response)
    assert events[0][0] == "message" and events[0][1]["content"] == "我最近在准备博士申请，有点焦虑。"
    deltas = "".join(data["text"] for name, data in events if name == "delta")
    assert events[-1][0] == "reply"
    assert events[-1][1]["content"] == deltas
    assert count(app, Message, Message.role == "assistant") == 1
    # Accept header works too
    clock.advance(5)
    response = api.post("/api/tasks/T1/messages", json={"content": "谢谢"}, headers={"Accept": "text/event-stream"})
    assert sse_events(response)[-1][0] == "reply"


def test_streaming_when_every_provider_fails_keeps_the_message(settings, clock, database):
    app = build_app(settings, clock, [DownModel()])
    api = started_participant(app, clock)
    events = sse_events(api.post("/api/tasks/T1/messages?stream=1", json={"content": "still here"}))
    assert [name for name, _ in events] == ["message", "error"]
    assert events[1][1]["error"] == "provider_unavailable"
    assert count(app, Message, Message.role == "user") == 1
    assert count(app, Message, Message.role == "assistant") == 0


@pytest.mark.parametrize("group,expected", [("L1", 0), ("L2", 7)])
def test_l1_and_l2_context_from_earlier_tasks(app, clock, make_participant, study, group, expected):
    runtime = app.extensions["memory_lab"]
    runtime.settings.study = runtime.study.with_overrides({"enabled_conditions": [group]})
    api = make_participant(f"ctx{group}")
    lines = [f"第{i}件事：我喜欢第{i}种水果。" for i in range(1, 10)]
    walk_task(api, clock, "T1", lines, study=study)
    clock.advance(days=2)
    api.post("/api/tasks/T2/start")
    clock.advance(5)
    reply = api.post("/api/tasks/T2/messages", json={"content": "你还记得我说过什么吗？"}).get_json()["reply"]
    with app.extensions["memory_lab"].db.Session() as session:
        context = session.get(Message, reply["id"]).memory_context
    turns = context["recent_turns"]
    assert len(turns) == expected
    assert [t["user"] for t in turns] == lines[len(lines) - expected:] if expected else turns == []
    assert all(t["task_id"] == "T1" for t in turns)


@pytest.mark.parametrize("group,kept_turns", [("L1", 0), ("L2", 7), ("L3", 3)])
def test_within_task_window_switch_truncates_the_task_in_progress(app, clock, make_participant, group, kept_turns):
    runtime = app.extensions["memory_lab"]
    runtime.settings.study = runtime.study.with_overrides({"enabled_conditions": [group],
                                                           "within_task_window_manipulated": True})
    api = make_participant(f"win{group}")
    api.post("/api/tasks/T1/start")
    for i in range(9):
        clock.advance(5)
        reply = api.post("/api/tasks/T1/messages", json={"content": f"message {i}"}).get_json()["reply"]
    with app.extensions["memory_lab"].db.Session() as session:
        prompt = session.get(Message, reply["id"]).prompt
    history_users = [m["content"] for m in prompt[1:-1] if m["role"] == "user"]
    assert history_users == [f"message {i}" for i in range(8 - kept_turns, 8)]
    assert prompt[-1]["content"] == "message 8"


@pytest.mark.postgres
def test_l4_recall_is_written_with_the_reply_and_not_when_the_reply_fails(app, clock, make_participant, study):
    from database.models import RecallEvent

    runtime = app.extensions["memory_lab"]
    # Three T1 memories are too few for the calibrated model's z-scores; the previous cosine rescaling
    # recalls the allergy here, and this test is about when the recall is written, not about r.
    runtime.settings.study = runtime.study.with_overrides({"enabled_conditions": ["L4"],
                                                           "memory": {"recall": {"preset": "cosine_bands"}}})
    api = make_participant("recall01")
    walk_task(api, clock, "T1", ["我叫林晓。", "我对海鲜过敏，吃了会起疹子。", "我养了一只猫。"], study=study)
    clock.advance(days=2)
    api.post("/api/tasks/T2/start")
    clock.advance(5)
    with runtime.db.Session() as session:
        before = {m.id: (m.consolidation_g, m.recall_count) for m in session.scalars(
            select(Message).where(Message.role == "user", Message.task_id == "T1"))}
    assert all(g is not None for g, _ in before.values())  # T1 was consolidated when its chat closed
    working = runtime.llm
    runtime.llm = LLMService([DownModel()])
    failed = api.post("/api/tasks/T2/messages", json={"content": "你还记得我对什么过敏吗？"})
    assert failed.status_code == 503
    assert count(app, RecallEvent) == 0
    with runtime.db.Session() as session:
        assert {m.id: (m.consolidation_g, m.recall_count) for m in session.scalars(
            select(Message).where(Message.role == "user", Message.task_id == "T1"))} == before
    runtime.llm = working
    retry = api.post(f"/api/tasks/T2/messages/{failed.get_json()['details']['message_id']}/reply")
    assert retry.status_code == 201
    with runtime.db.Session() as session:
        reply = session.get(Message, retry.get_json()["reply"]["id"])
        events = session.scalars(select(RecallEvent)).all()
        recalled = [e for e in events if e.recalled]
        assert len(events) == len(reply.memory_context["recall_candidates"]) > 0
        assert [e["message_id"] for e in reply.memory_context["recalled"]] == [e.memory_message_id for e in recalled]
        assert any("海鲜" in m["text"] for m in reply.memory_context["recalled"])
        for event in recalled:
            memory = session.get(Message, event.memory_message_id)
            assert memory.recall_count == before[memory.id][1] + 1
            assert memory.consolidation_g == pytest.approx(event.g_after) and event.g_after > event.g_before
            assert memory.last_recall_at == event.created_at
