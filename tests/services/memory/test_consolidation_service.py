"""ConsolidationService: profile versions, per-message memory fields, LLM failures, idempotency, crashes."""
from __future__ import annotations

import json

import pytest
from sqlalchemy import select

from database.models import ConsolidationRun, Message, ProfileVersion, ProviderFailure, TaskSession
from services.llm.chain import LLMService
from services.llm.embedding_service import from_blob
from services.llm.providers.offline import OfflineChatProvider
from services.llm.retry import RetryPolicy
from services.llm.types import ProviderError
from services.memory.consolidation_service import OFFLINE_RULES, ConsolidationService, describe
from services.memory.profile.schema import split_tag, validation_errors
from services.recall.formulas import emotional_salience
from tests.memory_factories import EMBEDDER, T1_EN, T1_ZH, add_task, make_participant
from tests.model_doubles import ScriptedModel


def chain(*providers) -> LLMService:
    return LLMService(list(providers), retry=RetryPolicy(max_retries=0), sleep=lambda _: None)


def service(database, settings, clock, llm=None, **kwargs) -> ConsolidationService:
    return ConsolidationService(database, settings, llm=llm or chain(OfflineChatProvider()), embedder=EMBEDDER,
                                clock=clock, **kwargs)


def seed(database, clock, *, username="p1", group="L3", turns=T1_ZH, task_id="T1", language="zh"):
    with database.session() as session:
        user = make_participant(session, clock, username=username, group=group, language=language)
        ts = add_task(session, clock, user, task_id, turns)
        return user.id, ts.id


def add_later_task(database, clock, user_id, task_id, turns, **kwargs):
    from database.models import User

    with database.session() as session:
        return add_task(session, clock, session.get(User, user_id), task_id, turns, **kwargs).id


def profiles(database, user_id):
    with database.session() as session:
        return session.scalars(select(ProfileVersion).where(ProfileVersion.user_id == user_id,
                                                            ProfileVersion.kind == "gist")
                               .order_by(ProfileVersion.version)).all()


def snapshot(database, user_id):
    """Everything consolidation may write for one participant, without ids (so participants compare)."""
    with database.session() as session:
        return {
            "profiles": [(p.version, p.task_id, p.content, p.rendered, p.source, p.created_at)
                         for p in session.scalars(select(ProfileVersion).where(ProfileVersion.user_id == user_id)
                                                  .order_by(ProfileVersion.kind, ProfileVersion.version))],
            "messages": [(m.task_id, m.role, m.content, m.embedding, m.embedding_model, m.importance_score,
                          m.emotional_intensity, m.self_disclosure, m.value_relevance, m.emotional_salience,
                          m.consolidation_g, m.recall_count, m.last_recall_at, m.consolidated_at)
                         for m in session.scalars(select(Message).where(Message.user_id == user_id)
                                                  .order_by(Message.id))],
            "sessions": [(t.task_id, t.status, t.consolidation_status)
                         for t in session.scalars(select(TaskSession).where(TaskSession.user_id == user_id)
                                                  .order_by(TaskSession.id))],
        }


def runs(database, ts_id):
    with database.session() as session:
        return session.scalars(select(ConsolidationRun).where(ConsolidationRun.task_session_id == ts_id)
                               .order_by(ConsolidationRun.id)).all()


def failures(database):
    with database.session() as session:
        return session.scalars(select(ProviderFailure).order_by(ProviderFailure.id)).all()


def valid_llm_profile(task_id="T2", name="李明 [T1]") -> str:
    return json.dumps({
        "basic_info": {"name": name},
        "preferences": ["喜欢爬山 [T1]"], "constraints": ["对海鲜过敏 [T1]"], "goals": ["申请博士 [T1]"],
        "personality": [], "social": ["养了一只猫 [T1]"], "emotional_needs": [], "core_values": [],
        "significant_events": [f"升学考试顺利 [{task_id}]"],
    }, ensure_ascii=False)


# ---------------------------------------------------------------------------
# The offline path
# ---------------------------------------------------------------------------


def test_offline_consolidation_writes_a_chinese_profile_and_memory_fields(database, settings, clock):
    user_id, ts_id = seed(database, clock)
    summary = service(database, settings, clock).consolidate_task_session(ts_id)

    assert summary.status == "succeeded", summary.error
    [version] = profiles(database, user_id)
    assert version.version == 1 and version.task_id == "T1" and version.source == OFFLINE_RULES
    assert validation_errors(version.content) == []
    content = version.content
    assert content["basic_info"]["name"] == "李明 [T1]"
    assert "对海鲜过敏 [T1]" in content["constraints"]
    assert any("猫" in item and item.endswith("[T1]") for item in content["social"])
    assert any("博士" in item and "焦虑" in item for item in content["significant_events"])
    assert "申请博士 [T1]" in content["goals"]
    assert version.rendered.startswith("基本信息：姓名：李明 [T1]") and len(version.rendered) <= 500

    with database.session() as session:
        user_messages = session.scalars(select(Message).where(Message.task_session_id == ts_id,
                                                              Message.role == "user")).all()
        replies = session.scalars(select(Message).where(Message.task_session_id == ts_id,
                                                        Message.role == "assistant")).all()
        assert len(user_messages) == 10
        for m in user_messages:
            assert m.consolidated_at == clock.now() and m.embedding_model == EMBEDDER.model
            assert from_blob(m.embedding).shape == (EMBEDDER.dim,)
            for score in (m.emotional_intensity, m.self_disclosure, m.value_relevance, m.importance_score):
                assert 0.0 <= score <= 1.0
            expected = emotional_salience(m.emotional_intensity, m.self_disclosure, m.value_relevance)
            assert m.emotional_salience == pytest.approx(expected)
            assert m.consolidation_g == pytest.approx(1.0 + 0.5 * m.emotional_salience)
        assert all(m.consolidated_at is None and m.embedding is None for m in replies)
        by_text = {m.content: m for m in user_messages}
        # Telling one's anxiety outweighs small talk in salience and in importance.
        anxious, weather = by_text["最近在申请博士，压力很大，很焦虑。"], by_text["今天天气还不错。"]
        assert anxious.emotional_salience > weather.emotional_salience
        assert anxious.importance_score > weather.importance_score
        assert session.get(TaskSession, ts_id).consolidation_status == "done"
    [run] = runs(database, ts_id)
    assert run.status == "succeeded" and run.steps["profile"]["source"] == OFFLINE_RULES
    assert run.steps["profile"]["version"] == 1 and run.trigger == "task_end"
    # every message is embedded, but the run records which ones are not recall candidates (no content)
    assert run.steps["messages"]["not_recall_candidates"] == [by_text["好的，今天就聊到这里吧。"].id]


def test_english_conversation_gives_an_english_profile(database, settings, clock):
    user_id, ts_id = seed(database, clock, turns=T1_EN, language="en")
    assert service(database, settings, clock).consolidate_task_session(ts_id).status == "succeeded"
    [version] = profiles(database, user_id)
    assert version.content["basic_info"]["name"] == "Anna [T1]"
    assert "allergic to shellfish [T1]" in version.content["constraints"]
    assert "has a cat called Milo [T1]" in version.content["social"]
    assert any("anxious" in item for item in version.content["significant_events"])
    assert version.rendered.startswith("Basic info: name: Anna [T1]")
    assert not any("\u4e00" <= c <= "\u9fff" for c in version.rendered)


def test_rendered_gist_respects_the_configured_cap(database, settings, clock):
    settings.study = settings.study.with_overrides({"memory": {"gist_max_chars": 80}})
    user_id, ts_id = seed(database, clock)
    service(database, settings, clock).consolidate_task_session(ts_id)
    [version] = profiles(database, user_id)
    assert 0 < len(version.rendered) <= 80
    assert "李明" in version.rendered  # who the person is survives the cut


def test_groups_without_a_profile_still_get_memory_fields(database, settings, clock):
    user_id, ts_id = seed(database, clock, group="L1")
    summary = service(database, settings, clock).consolidate_task_session(ts_id)
    assert summary.status == "succeeded"
    assert profiles(database, user_id) == []
    assert summary.steps["profile"]["status"] == "skipped"
    with database.session() as session:
        assert all(m.consolidation_g is not None for m in session.scalars(
            select(Message).where(Message.task_session_id == ts_id, Message.role == "user")))


@pytest.mark.postgres
def test_second_task_merges_incrementally_with_corrections_and_keeps_old_versions(database, settings, clock):
    user_id, t1 = seed(database, clock)
    svc = service(database, settings, clock)
    svc.consolidate_task_session(t1)
    clock.advance(days=2)
    t2 = add_later_task(database, clock, user_id, "T2", [
        ("其实我叫李小明。", "好的，小明。"),
        ("我现在不养猫了，送给了朋友。", "明白了。"),
        ("我还是很喜欢爬山。", "太好了。"),
    ])
    assert svc.consolidate_task_session(t2).status == "succeeded"

    v1, v2 = profiles(database, user_id)
    assert v1.version == 1 and v1.content["basic_info"]["name"] == "李明 [T1]"  # old version untouched
    assert "养了一只猫，叫团子 [T1]" in v1.content["social"]
    assert v2.version == 2 and v2.task_id == "T2"
    assert v2.content["basic_info"]["name"] == "李小明 [T2]"
    assert not any("养了一只猫" in item for item in v2.content["social"])
    assert "现在不养猫了 [T2]" in v2.content["social"]
    assert "对海鲜过敏 [T1]" in v2.content["constraints"]  # unrelated facts keep their tag
    assert "喜欢爬山 [T1, T2]" in v2.content["preferences"]  # said again: both tasks shown


# ---------------------------------------------------------------------------
# Idempotency, ordering, dry runs
# ---------------------------------------------------------------------------


@pytest.mark.postgres
def test_running_twice_changes_nothing(database, settings, clock):
    user_id, ts_id = seed(database, clock)
    svc = service(database, settings, clock)
    assert svc.consolidate_task_session(ts_id).status == "succeeded"
    before = snapshot(database, user_id)
    clock.advance(3600)
    again = svc.consolidate_task_session(ts_id, trigger="manual")
    assert again.status == "skipped" and again.reason == "already consolidated"
    assert snapshot(database, user_id) == before
    assert len(runs(database, ts_id)) == 1
    assert svc.consolidate_all_pending() == []


def test_pending_sessions_are_closed_unconsolidated_ones_oldest_first(database, settings, clock):
    user_id, t1 = seed(database, clock)
    t2 = add_later_task(database, clock, user_id, "T2", [("你好", "你好")], status="abandoned")
    add_later_task(database, clock, user_id, "T3", [("还在聊", None)], status="in_progress", phase="chat")
    t4 = add_later_task(database, clock, user_id, "T4", [("重来", None)], status="reset")
    svc = service(database, settings, clock)
    assert svc.pending_task_sessions() == [t1, t2]
    assert svc.consolidate_task_session(t4).status == "skipped"

    results = svc.consolidate_all_pending(trigger="sweep")
    assert [(r.task_session_id, r.status) for r in results] == [(t1, "succeeded"), (t2, "succeeded")]
    assert svc.pending_task_sessions() == []
    assert [p.version for p in profiles(database, user_id)] == [1, 2]


def test_an_open_chat_is_not_consolidated(database, settings, clock):
    with database.session() as session:
        user = make_participant(session, clock, username="p1", group="L3")
        ts_id = add_task(session, clock, user, "T1", T1_ZH[:2], status="in_progress", phase="chat").id
    summary = service(database, settings, clock).consolidate_task_session(ts_id)
    assert summary.status == "not_ready"
    assert runs(database, ts_id) == []


def test_an_earlier_unconsolidated_task_is_consolidated_first(database, settings, clock):
    user_id, t1 = seed(database, clock)
    t2 = add_later_task(database, clock, user_id, "T2", [("我现在不养猫了。", "好的。")])
    assert service(database, settings, clock).consolidate_task_session(t2).status == "succeeded"
    v1, v2 = profiles(database, user_id)
    assert (v1.task_id, v2.task_id) == ("T1", "T2")
    assert "现在不养猫了 [T2]" in v2.content["social"]


def test_dry_run_reports_and_writes_nothing(database, settings, clock):
    user_id, ts_id = seed(database, clock)
    before = snapshot(database, user_id)
    summary = service(database, settings, clock).consolidate_task_session(ts_id, trigger="manual", dry_run=True)
    assert summary.status == "dry_run"
    assert "constraints: 对海鲜过敏 [T1]" in summary.changes["profile"]["diff"]["added"]
    assert summary.changes["profile"]["new_version"] == 1
    assert len(summary.changes["messages"]) == 10
    assert "not recall candidates (no content): message(s) " in describe(summary)
    assert snapshot(database, user_id) == before
    assert runs(database, ts_id) == []


# ---------------------------------------------------------------------------
# Crashes: no half-written state, and a rerun equals one clean run
# ---------------------------------------------------------------------------


class Killed(BaseException):
    """Stands for the process dying: not an Exception, so nothing gets to record it."""


@pytest.mark.postgres
@pytest.mark.parametrize("crash_at", ["profile", "salience", "embeddings", "before_commit"])
def test_crash_between_steps_leaves_nothing_and_rerun_equals_clean_run(database, settings, clock, crash_at):
    clean_user, clean_ts = seed(database, clock, username="clean")
    crash_user, crash_ts = seed(database, clock, username="crash")
    untouched = snapshot(database, crash_user)

    def hook(step):
        if step == crash_at:
            raise RuntimeError(f"simulated crash after {step}")

    crashed = service(database, settings, clock, step_hook=hook).consolidate_task_session(crash_ts)
    assert crashed.status == "failed" and "simulated crash" in crashed.error
    after_crash = snapshot(database, crash_user)
    assert after_crash["profiles"] == untouched["profiles"] == []
    assert after_crash["messages"] == untouched["messages"]
    assert after_crash["sessions"] == [("T1", "done", "failed")]
    [failed_run] = runs(database, crash_ts)
    assert failed_run.status == "failed" and "simulated crash" in failed_run.error

    svc = service(database, settings, clock)
    assert svc.pending_task_sessions() == [clean_ts, crash_ts]
    assert svc.consolidate_task_session(crash_ts, trigger="sweep").status == "succeeded"
    assert svc.consolidate_task_session(clean_ts).status == "succeeded"
    assert snapshot(database, crash_user) == snapshot(database, clean_user)
    assert [r.status for r in runs(database, crash_ts)] == ["failed", "succeeded"]


@pytest.mark.postgres
def test_killed_run_holds_its_claim_until_the_lease_expires(database, settings, clock):
    clean_user, clean_ts = seed(database, clock, username="clean")
    crash_user, crash_ts = seed(database, clock, username="crash")

    def hook(step):
        if step == "before_commit":
            raise Killed()

    with pytest.raises(Killed):
        service(database, settings, clock, step_hook=hook).consolidate_task_session(crash_ts)
    assert snapshot(database, crash_user)["profiles"] == []
    assert snapshot(database, crash_user)["sessions"] == [("T1", "done", "running")]

    svc = service(database, settings, clock, lease_seconds=600)
    assert svc.consolidate_task_session(crash_ts).status == "busy"  # it might still be alive
    assert svc.pending_task_sessions() == [clean_ts]
    clock.advance(601)
    assert svc.pending_task_sessions() == [clean_ts, crash_ts]
    assert svc.consolidate_task_session(crash_ts).status == "succeeded"
    assert svc.consolidate_task_session(clean_ts).status == "succeeded"
    assert snapshot(database, crash_user) == snapshot(database, clean_user)
    stale, done = runs(database, crash_ts)
    assert stale.status == "failed" and "lease expired" in stale.error and done.status == "succeeded"


# ---------------------------------------------------------------------------
# Language-model path: invalid JSON, repair, timeouts
# ---------------------------------------------------------------------------


def consolidated_t1(database, settings, clock):
    """T1 consolidated offline (profile v1), and a finished T2 waiting for consolidation."""
    user_id, t1 = seed(database, clock)
    service(database, settings, clock).consolidate_task_session(t1)
    clock.advance(days=2)
    t2 = add_later_task(database, clock, user_id, "T2", [("我考试考得很顺利！", "恭喜你！")])
    return user_id, t2


@pytest.mark.postgres
def test_invalid_json_twice_keeps_the_old_profile_and_logs_the_failure(database, settings, clock):
    user_id, t2 = consolidated_t1(database, settings, clock)
    before = snapshot(database, user_id)
    model = ScriptedModel("好的，这是画像：{不是 JSON", '{"basic_info": "李明", "goals": "申请博士"}')

    summary = service(database, settings, clock, llm=chain(model)).consolidate_task_session(t2)

    assert summary.status == "failed"
    assert len([r for r in model.requests if r.purpose == "consolidation"]) == 2  # one answer + one repair
    assert model.requests[1].messages[-1]["role"] == "user" and "JSON" in model.requests[1].messages[-1]["content"]
    assert all(r.json_mode for r in model.requests)
    assert snapshot(database, user_id) == {**before, "sessions": [("T1", "done", "done"), ("T2", "done", "failed")]}
    [v1] = profiles(database, user_id)
    assert "对海鲜过敏 [T1]" in v1.content["constraints"]
    [failure] = failures(database)
    assert failure.error_class == "InvalidProfileJSON" and failure.purpose == "consolidation"
    assert failure.provider == "scripted" and failure.user_id == user_id
    [run] = [r for r in runs(database, t2)]
    assert run.status == "failed" and run.steps["profile"]["status"] == "failed"
    assert len(run.steps["profile"]["answers"]) == 2


def test_a_repaired_answer_is_used(database, settings, clock):
    user_id, t2 = consolidated_t1(database, settings, clock)
    fenced = f"当然！\n```json\n{valid_llm_profile()}\n```\n希望有帮助。"
    scores = json.dumps({"scores": []})
    model = ScriptedModel("not json at all", fenced, scores)
    summary = service(database, settings, clock, llm=chain(model)).consolidate_task_session(t2)
    assert summary.status == "succeeded", summary.error
    v1, v2 = profiles(database, user_id)
    assert v2.source == "scripted/scripted-json" and summary.steps["profile"]["repaired"] is True
    assert "升学考试顺利 [T2]" in v2.content["significant_events"]
    assert v2.rendered.startswith("基本信息：姓名：李明 [T1]")


def test_llm_prompt_keeps_the_participant_language(database, settings, clock):
    user_id, t2 = consolidated_t1(database, settings, clock)
    model = ScriptedModel(valid_llm_profile(), json.dumps({"scores": []}))
    service(database, settings, clock, llm=chain(model)).consolidate_task_session(t2)
    system = model.requests[0].messages[0]["content"]
    assert "用户画像" in system and model.requests[0].language == "zh"
    assert "[T2]" in system
    assert "对海鲜过敏 [T1]" in model.requests[0].messages[1]["content"]  # the old profile goes in

    with database.session() as session:
        en_user = make_participant(session, clock, username="en", group="L4", language="en")
        en_ts = add_task(session, clock, en_user, "T1", T1_EN).id
    en_model = ScriptedModel(json.dumps({"basic_info": {"name": "Anna"}, **{k: [] for k in (
        "preferences", "constraints", "goals", "personality", "social", "emotional_needs", "core_values",
        "significant_events")}}), json.dumps({"scores": []}))
    service(database, settings, clock, llm=chain(en_model)).consolidate_task_session(en_ts)
    assert en_model.requests[0].language == "en" and "user profile" in en_model.requests[0].messages[0]["content"]
    [en_profile] = profiles(database, en_user.id)
    assert en_profile.content["basic_info"]["name"] == "Anna [T1]"  # the missing tag is added


def test_an_answer_that_drops_most_of_the_profile_is_refused(database, settings, clock):
    user_id, t2 = consolidated_t1(database, settings, clock)
    wipe = json.dumps({"basic_info": {}, **{k: [] for k in (
        "preferences", "constraints", "goals", "personality", "social", "emotional_needs", "core_values",
        "significant_events")}})
    summary = service(database, settings, clock, llm=chain(ScriptedModel(wipe))).consolidate_task_session(t2)
    assert summary.status == "failed"
    assert [p.version for p in profiles(database, user_id)] == [1]


def test_timeout_keeps_the_old_profile(database, settings, clock):
    user_id, t2 = consolidated_t1(database, settings, clock)
    before = snapshot(database, user_id)
    timeout = ProviderError("read timed out after 30 s", provider="scripted", retryable=True, kind="timeout")
    summary = service(database, settings, clock, llm=chain(ScriptedModel(timeout))).consolidate_task_session(t2)
    assert summary.status == "failed"
    assert snapshot(database, user_id)["profiles"] == before["profiles"]
    assert snapshot(database, user_id)["messages"] == before["messages"]
    [failure] = failures(database)
    assert failure.error_class == "timeout" and failure.purpose == "consolidation"

    # The sweep retries later; with the model back, the run succeeds.
    good = ScriptedModel(valid_llm_profile(), json.dumps({"scores": []}))
    assert service(database, settings, clock, llm=chain(good)).consolidate_all_pending()[0].status == "succeeded"
    assert [p.version for p in profiles(database, user_id)] == [1, 2]


def test_fallback_to_the_offline_responder_uses_the_rules_and_says_so(database, settings, clock):
    user_id, ts_id = seed(database, clock)
    timeout = ProviderError("timed out", provider="scripted", retryable=True, kind="timeout")
    svc = service(database, settings, clock, llm=chain(ScriptedModel(timeout), OfflineChatProvider()))
    summary = svc.consolidate_task_session(ts_id)
    assert summary.status == "succeeded"
    [version] = profiles(database, user_id)
    assert version.source == OFFLINE_RULES and "对海鲜过敏 [T1]" in version.content["constraints"]
    assert "fell back" in summary.steps["profile"]["reason"]
    assert {f.error_class for f in failures(database)} == {"timeout"}


def test_llm_salience_scores_are_clamped_and_missing_ones_filled(database, settings, clock):
    user_id, ts_id = seed(database, clock, turns=T1_ZH[:3])
    with database.session() as session:
        ids = [m.id for m in session.scalars(select(Message).where(Message.task_session_id == ts_id,
                                                                   Message.role == "user").order_by(Message.id))]
    scores = json.dumps({"scores": [
        {"id": ids[0], "emotional_intensity": 1.7, "self_disclosure_depth": -0.3, "value_relevance": "0.5"},
        {"id": ids[1], "emotional_intensity": None, "self_disclosure_depth": 0.9, "value_relevance": 0.1},
    ]})
    model = ScriptedModel(valid_llm_profile("T1"), scores)
    summary = service(database, settings, clock, llm=chain(model)).consolidate_task_session(ts_id)
    assert summary.status == "succeeded"
    assert summary.steps["salience"]["source"] == "llm+lexicon" and summary.steps["salience"]["lexicon_filled"] == 2
    with database.session() as session:
        first, second, third = (session.get(Message, i) for i in ids)
    assert (first.emotional_intensity, first.self_disclosure, first.value_relevance) == (1.0, 0.0, 0.5)
    assert first.emotional_salience == pytest.approx(0.4 * 1.0 + 0.4 * 0.0 + 0.2 * 0.5)
    assert first.consolidation_g == pytest.approx(1.0 + 0.5 * first.emotional_salience)
    for message in (second, third):  # unusable entries fall back to the lexicon, still in range
        assert 0.0 <= message.emotional_salience <= 1.0


def test_without_a_given_chain_the_settings_consolidation_chain_is_used(database, settings, clock):
    # the app passes its consolidation chain (Runtime.consolidation_llm); scripts pass none
    settings.consolidation_providers = ["offline"]
    settings.llm_providers = ["openai_compatible"]
    settings.openai_base_url = "http://127.0.0.1:9/v1"  # would fail if it were asked
    user_id, ts_id = seed(database, clock)
    built = ConsolidationService(database, settings, embedder=EMBEDDER, clock=clock)
    assert [p.name for p in built.llm.providers] == ["offline"]
    assert built.consolidate_task_session(ts_id).status == "succeeded"
    assert profiles(database, user_id)[0].source == OFFLINE_RULES


def test_profile_items_are_tagged_with_their_task(database, settings, clock):
    user_id, ts_id = seed(database, clock)
    service(database, settings, clock).consolidate_task_session(ts_id)
    [version] = profiles(database, user_id)
    for value in [*version.content["basic_info"].values(),
                  *(i for k, v in version.content.items() if k != "basic_info" for i in v)]:
        assert split_tag(value)[1] == ["T1"], value


def test_r1_participants_get_their_recursive_memory_updated(database, settings, clock):
    user_id, ts_id = seed(database, clock, group="R1", turns=T1_ZH[:4])
    summary = service(database, settings, clock).consolidate_task_session(ts_id)
    assert summary.status == "succeeded", summary.error
    assert summary.steps["r1"]["status"] == "created"
    assert profiles(database, user_id) == []  # R1 reads no gist profile
    with database.session() as session:
        [memory] = session.scalars(select(ProfileVersion).where(ProfileVersion.user_id == user_id)).all()
    assert memory.kind == "r1_memory" and memory.task_id == "T1" and memory.consolidation_run_id == summary.run_id
