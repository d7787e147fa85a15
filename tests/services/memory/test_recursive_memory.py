"""R1: recursive memory iteration (offline rules and LLM path), validation, memory-grounded context."""
from __future__ import annotations

import json
from datetime import timedelta

import pytest
from sqlalchemy import select

from database.models import ConsolidationRun, Message, ProfileVersion, ProviderFailure, TaskSession, User
from services.llm.chain import LLMService
from services.llm.providers.offline import OfflineChatProvider
from services.memory import recursive_summary as r1
from services.memory.engine import MemoryEngine
from tests.conftest import walk_task
from tests.model_doubles import ScriptedModel

OFFLINE = LLMService([OfflineChatProvider()])

T1_TURNS = [
    ("你好！", "你好，很高兴认识你。"),
    ("我叫李明，在北京读研究生。", "谢谢你和我分享这些。"),
    ("我对海鲜过敏，吃虾会起疹子。", "我在认真听。"),
    ("我养了一只橘猫，叫咪咪。", "嗯，我明白你的意思。"),
    ("最近在准备博士申请，压力很大，很焦虑。", "能再多说一点吗？"),
]
T2_TURNS = [
    ("我最近开始学游泳了。", "谢谢你和我分享这些。"),
    ("我的博士申请材料已经交上去了，没那么焦虑了。", "我在认真听。"),
]


def make_user(session, clock, *, language="zh", name="p001") -> User:
    user = User(username=name, password_hash="x", role="participant", participant_code=name.upper(),
                language=language, created_at=clock.now())
    session.add(user)
    session.flush()
    return user


def run_task(session, clock, user, task_id, turns, *, provider="offline", status="done") -> TaskSession:
    ts = TaskSession(user_id=user.id, task_id=task_id, attempt=1, status="in_progress", phase="chat",
                     started_at=clock.now(), last_activity_at=clock.now())
    session.add(ts)
    session.flush()
    for question, answer in turns:
        message = Message(user_id=user.id, task_session_id=ts.id, task_id=task_id, role="user", content=question,
                          created_at=clock.now())
        session.add(message)
        session.flush()
        clock.advance(20)
        session.add(Message(user_id=user.id, task_session_id=ts.id, task_id=task_id, role="assistant",
                            content=answer, created_at=clock.now(), reply_to_id=message.id, provider=provider,
                            memory_group="R1"))
        clock.advance(40)
    ts.status, ts.phase, ts.completed_at = status, "closed", clock.now()
    session.flush()
    return ts


def make_run(session, clock, ts) -> ConsolidationRun:
    run = ConsolidationRun(user_id=ts.user_id, task_session_id=ts.id, task_id=ts.task_id, trigger="task_end",
                           status="running", started_at=clock.now())
    session.add(run)
    session.flush()
    return run


def memory_versions(session, user) -> list[ProfileVersion]:
    return session.scalars(select(ProfileVersion).where(ProfileVersion.user_id == user.id,
                                                        ProfileVersion.kind == "r1_memory")
                           .order_by(ProfileVersion.version)).all()


def memory(*items: tuple[str, str]) -> dict:
    return {"memory_summary": [{"id": i, "summary": s} for i, s in items],
            "raw_memory_entries": [{"id": i, "user_question": s, "assistant_answer": "", "notes": ""}
                                   for i, s in items]}


# ---------------------------------------------------------------------------
# Validation
# ---------------------------------------------------------------------------


def test_id_sync_accepts_matching_tracks():
    assert r1.id_sync_errors(memory(("m-T1-01", "对海鲜过敏"), ("m-T1-02", "养了一只猫"))) == []
    assert r1.validate_memory(memory(("m-T1-01", "对海鲜过敏")), language="zh") == []


def test_id_sync_finds_unpaired_and_repeated_ids():
    broken = memory(("m-T1-01", "对海鲜过敏"), ("m-T1-02", "养了一只猫"))
    broken["raw_memory_entries"][1]["id"] = "m-T1-03"
    broken["memory_summary"].append({"id": "m-T1-01", "summary": "重复"})
    errors = r1.id_sync_errors(broken)
    assert "memory_summary repeats ids ['m-T1-01']" in errors
    assert "ids ['m-T1-02'] have a summary item but no raw entry" in errors
    assert "ids ['m-T1-03'] have a raw entry but no summary item" in errors


def test_validate_memory_schema_language_and_wipe():
    no_notes = memory(("m-T1-01", "对海鲜过敏"))
    del no_notes["raw_memory_entries"][0]["notes"]
    assert any("notes" in e for e in r1.validate_memory(no_notes))
    assert r1.validate_memory({"memory_summary": []}) != []
    assert r1.validate_memory(memory(("m-T1-01", "allergic to seafood")), language="zh") == [
        "summaries must be written in Simplified Chinese (简体中文), the participant's language"]
    previous = memory(("m-T1-01", "对海鲜过敏"))
    assert r1.validate_memory(r1.empty_memory(), previous=previous) == [
        "the new memory is empty although the previous one was not"]


# ---------------------------------------------------------------------------
# Offline rule-based iteration
# ---------------------------------------------------------------------------


def test_offline_iteration_over_two_tasks_keeps_t1_facts(db_session, clock, study):
    user = make_user(db_session, clock)
    t1 = run_task(db_session, clock, user, "T1", T1_TURNS)
    steps = r1.consolidate_task(db_session, llm=OFFLINE, user=user, task_session=t1,
                                run=make_run(db_session, clock, t1), clock=clock, study=study)
    assert steps == {"status": "created", "version": 1, "source": "offline-rules", "items": 4, "added": 4,
                     "dropped": 0, "turns": 5}  # the greeting has no content words and is not remembered
    clock.advance(days=2)
    t2 = run_task(db_session, clock, user, "T2", T2_TURNS)
    steps = r1.consolidate_task(db_session, llm=OFFLINE, user=user, task_session=t2,
                                run=make_run(db_session, clock, t2), clock=clock, study=study)
    assert steps["status"] == "created" and steps["version"] == 2 and steps["added"] == 1

    v1, v2 = memory_versions(db_session, user)
    assert (v1.version, v1.task_id, v2.version, v2.task_id) == (1, "T1", 2, "T2")
    assert v2.consolidation_run_id is not None and v2.content["basis"]["previous_version"] == 1
    assert r1.validate_memory(r1.memory_part(v2.content), language="zh") == []
    summaries = {item["id"]: item["summary"] for item in v2.content["memory_summary"]}
    # T1 facts are retained under their T1 ids ...
    assert summaries["m-T1-01"] == "用户说：我叫李明，在北京读研究生 [T1]"
    assert summaries["m-T1-02"] == "用户说：我对海鲜过敏，吃虾会起疹子 [T1]"
    assert summaries["m-T1-03"] == "用户说：我养了一只橘猫，叫咪咪 [T1]"
    # ... the PhD item is updated in place by T2 (same id, old wording kept in the notes) ...
    assert summaries["m-T1-04"] == "用户说：我的博士申请材料已经交上去了，没那么焦虑了 [T2]"
    raw = {entry["id"]: entry for entry in v2.content["raw_memory_entries"]}
    assert raw["m-T1-04"]["user_question"] == "我的博士申请材料已经交上去了，没那么焦虑了。"
    assert raw["m-T1-04"]["notes"] == "T2 更新，此前：用户说：最近在准备博士申请，压力很大，很焦虑"
    assert raw["m-T1-02"]["user_question"] == "我对海鲜过敏，吃虾会起疹子。"  # verbatim
    # ... and the new T2 fact gets a T2 id.
    assert summaries["m-T2-01"] == "用户说：我最近开始学游泳了 [T2]"
    # Version 1 is kept unchanged.
    assert len(v1.content["memory_summary"]) == 4 and "游泳" not in v1.rendered


def test_consolidating_the_same_task_twice_is_a_no_op(db_session, clock, study):
    user = make_user(db_session, clock)
    t1 = run_task(db_session, clock, user, "T1", T1_TURNS)
    first = r1.consolidate_task(db_session, llm=OFFLINE, user=user, task_session=t1, run=None, clock=clock,
                                study=study)
    again = r1.consolidate_task(db_session, llm=OFFLINE, user=user, task_session=t1, run=None, clock=clock,
                                study=study)
    assert again == {"status": "exists", "version": first["version"], "source": "offline-rules"}
    assert len(memory_versions(db_session, user)) == 1


def test_task_without_dialogue_writes_nothing(db_session, clock, study):
    user = make_user(db_session, clock)
    t1 = run_task(db_session, clock, user, "T1", [])
    assert r1.consolidate_task(db_session, llm=OFFLINE, user=user, task_session=t1, run=None, clock=clock,
                               study=study)["status"] == "no_dialogue"
    assert memory_versions(db_session, user) == []


def test_english_offline_memory_stays_english():
    turns = [{"user": "I'm allergic to peanuts. Do you know any good snacks?", "assistant": "Try roasted chickpeas.",
              "assistant_is_llm": True}]
    result = r1.rule_based_iteration(None, turns, task_id="T1", language="en")
    assert result["memory_summary"] == [{
        "id": "m-T1-01",
        "summary": "The participant asked: I'm allergic to peanuts; Do you know any good snacks; "
                   "the assistant answered: Try roasted chickpeas [T1]"}]
    assert result["raw_memory_entries"][0]["assistant_answer"] == "Try roasted chickpeas."


# ---------------------------------------------------------------------------
# The LLM path
# ---------------------------------------------------------------------------


def test_malformed_update_keeps_previous_memory(db_session, clock, study):
    user = make_user(db_session, clock)
    t1 = run_task(db_session, clock, user, "T1", T1_TURNS)
    r1.consolidate_task(db_session, llm=OFFLINE, user=user, task_session=t1, run=None, clock=clock, study=study)
    clock.advance(days=2)
    t2 = run_task(db_session, clock, user, "T2", T2_TURNS, provider="scripted")
    unsynced = memory(("m-T1-01", "用户叫李明"), ("m-T2-01", "用户在学游泳"))
    unsynced["raw_memory_entries"].pop()
    provider = ScriptedModel('{"memory_summary": [}', json.dumps(unsynced, ensure_ascii=False))
    steps = r1.consolidate_task(db_session, llm=LLMService([provider]), user=user, task_session=t2, run=None,
                                clock=clock, study=study)
    assert steps["status"] == "kept_previous" and steps["version"] == 1 and steps["model_calls"] == 2
    assert "m-T2-01" in steps["error"]
    assert "no JSON object found" in provider.requests[1].messages[-1]["content"]
    assert [v.version for v in memory_versions(db_session, user)] == [1]
    failure = db_session.scalars(select(ProviderFailure)).one()
    assert (failure.purpose, failure.error_class, failure.user_id) == ("r1_memory", "InvalidModelOutput", user.id)
    # The memory a T3 reply is grounded in is still version 1.
    clock.advance(days=7)
    t3 = run_task(db_session, clock, user, "T3", [], status="in_progress")
    context = MemoryEngine(db_session, study, clock=clock).build_context(
        user_id=user.id, memory_group="R1", task_session=t3, query=None)
    assert context.get("r1_memory")["version"] == 1


def test_llm_iteration_is_validated_and_stored(db_session, clock, study):
    user = make_user(db_session, clock)
    t1 = run_task(db_session, clock, user, "T1", T1_TURNS[:3], provider="scripted")
    new_memory = memory(("m-T1-01", "用户叫李明，在北京读研究生"), ("m-T1-02", "用户对海鲜过敏，吃虾会起疹子"))
    provider = ScriptedModel(json.dumps(new_memory, ensure_ascii=False))
    run = make_run(db_session, clock, t1)
    steps = r1.consolidate_task(db_session, llm=LLMService([provider]), user=user, task_session=t1, run=run,
                                clock=clock, study=study)
    assert steps["status"] == "created" and steps["source"] == "scripted:scripted-json" and steps["items"] == 2
    request = provider.requests[0]
    assert request.json_mode and request.purpose == "consolidation" and len(provider.requests) == 1
    assert "我对海鲜过敏，吃虾会起疹子。" in request.messages[1]["content"]
    assert "Simplified Chinese" in request.messages[0]["content"]
    (row,) = memory_versions(db_session, user)
    assert r1.memory_part(row.content) == new_memory and row.consolidation_run_id == run.id


# ---------------------------------------------------------------------------
# The memory-grounded context
# ---------------------------------------------------------------------------


def test_memory_engine_returns_r1_memory_for_later_tasks(db_session, clock, study):
    user = make_user(db_session, clock)
    t1 = run_task(db_session, clock, user, "T1", T1_TURNS)
    r1.consolidate_task(db_session, llm=OFFLINE, user=user, task_session=t1, run=None, clock=clock, study=study)
    clock.advance(days=2)
    t2 = run_task(db_session, clock, user, "T2", T2_TURNS)
    r1.consolidate_task(db_session, llm=OFFLINE, user=user, task_session=t2, run=None, clock=clock, study=study)
    clock.advance(days=7)
    t3 = run_task(db_session, clock, user, "T3", [("你还记得我吗？", "")], status="in_progress")
    query = db_session.scalars(select(Message).where(Message.task_session_id == t3.id)).first()
    engine = MemoryEngine(db_session, study, clock=clock)
    context = engine.build_context(user_id=user.id, memory_group="R1", task_session=t3, query=query)
    assert context.get("r1_memory")["version"] == 2 and context.get("r1_memory")["source"] == "offline-rules"
    text = context.get("r1_memory")["text"]
    assert text.splitlines()[0] == "[m-T1-01] 用户说：我叫李明，在北京读研究生 [T1]"
    assert "[m-T2-01] 用户说：我最近开始学游泳了 [T2]" in text
    assert "原始问答:" in text and "[m-T1-02] 问: 我对海鲜过敏，吃虾会起疹子。" in text
    assert "[长期记忆]" in context.render()
    assert context.to_dict()["r1_memory"]["content"]["memory_summary"][0]["id"] == "m-T1-01"
    # Memory comes only from tasks completed before this one: T2's context holds T1's version.
    t2_context = engine.build_context(user_id=user.id, memory_group="R1", task_session=t2, query=None)
    assert t2_context.get("r1_memory")["version"] == 1 and "游泳" not in t2_context.get("r1_memory")["text"]
    fresh = make_user(db_session, clock, name="p002")
    first_task = run_task(db_session, clock, fresh, "T1", [], status="in_progress")
    empty = engine.build_context(user_id=fresh.id, memory_group="R1", task_session=first_task, query=None)
    assert empty.get("r1_memory") is None and {"code": "r1_empty", "params": {}} in empty.notes


def test_render_memory_caps_length_summaries_first():
    big = memory(*[(f"m-T1-{i:02d}", "用户说：" + "很长的句子" * 10) for i in range(1, 30)])
    text = r1.render_memory(big, "zh", max_chars=500)
    assert len(text) <= 500 and text.startswith("[m-T1-01]")
    small = memory(("m-T1-01", "用户对海鲜过敏"))
    assert r1.render_memory(small, "zh", max_chars=500) == (
        "[m-T1-01] 用户对海鲜过敏\n原始问答:\n[m-T1-01] 问: 用户对海鲜过敏 | 答: ")


@pytest.mark.parametrize("language", ["zh", "en"])
def test_rule_based_iteration_is_deterministic(language):
    turns = [{"user": "我喜欢爬山。" if language == "zh" else "I like hiking.", "assistant": ""}]
    assert r1.rule_based_iteration(None, turns, task_id="T1", language=language) == r1.rule_based_iteration(
        None, turns, task_id="T1", language=language)


# ---------------------------------------------------------------------------
# Through the app: consolidation after T1 iterates the memory; T2 replies are grounded in it
# ---------------------------------------------------------------------------


API_T1_LINES = ["你好，我叫林晓，是一名博士生。", "我对海鲜过敏，一吃就起疹子。", "我养了一只叫团子的猫。"]


def test_r1_participant_through_the_api(app, make_participant, clock, study):
    runtime = app.extensions["memory_lab"]
    runtime.settings.study = runtime.study.with_overrides({"enabled_conditions": ["R1"]})
    api = make_participant("r1bot")
    walk_task(api, clock, "T1", API_T1_LINES, study=study)
    with runtime.db.Session() as session:
        user = session.scalar(select(User).where(User.username == "r1bot"))
        run = session.scalars(select(ConsolidationRun).where(ConsolidationRun.user_id == user.id)).one()
        assert run.status == "succeeded" and run.steps["r1"]["status"] == "created"
        (version,) = memory_versions(session, user)
        assert version.consolidation_run_id == run.id and version.source == "offline-rules"
        t1_done = session.scalar(select(TaskSession.completed_at).where(TaskSession.user_id == user.id))
    clock.set(t1_done + timedelta(days=2))
    assert api.post("/api/tasks/T2/start").status_code == 201
    response = api.post("/api/tasks/T2/messages", json={"content": "你还记得我吗？"})
    assert response.status_code == 201, response.get_json()
    with runtime.db.Session() as session:
        reply = session.scalars(select(Message).where(Message.role == "assistant", Message.task_id == "T2")).one()
        memory_block = reply.memory_context["r1_memory"]
        assert memory_block["version"] == 1
        assert [i["id"] for i in memory_block["content"]["memory_summary"]] == ["m-T1-01", "m-T1-02", "m-T1-03"]
        assert "[长期记忆]" in reply.prompt[0]["content"] and "海鲜" in reply.content
