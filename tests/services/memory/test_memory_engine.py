"""MemoryEngine per condition, on the issue's scenario: what the context of a T2 reply shows in L1-L4.

T1 (ten turns, Chinese): name, seafood allergy, a cat and PhD-application anxiety in the first four
turns, then small talk. T1 is consolidated with the offline providers, the clock moves two days,
and in T2 the participant asks what the assistant remembers.
"""
from __future__ import annotations

import json

import pytest
from sqlalchemy import select

from database.models import RecallEvent, User
from services.llm.chain import LLMService
from services.llm.providers.offline import OfflineChatProvider
from services.llm.types import ChatRequest
from services.memory.consolidation_service import ConsolidationService
from services.memory.engine import MemoryEngine
from services.recall.word_lists import word_list_hashes
from tests.memory_factories import EMBEDDER, T1_ZH, add_message, add_task, make_participant

DISCLOSURES = ("李明", "海鲜", "猫", "博士")


def scenario(database, settings, clock, group, *, question="你还记得我对什么过敏吗？"):
    """Returns (engine session, context) for the T2 message ``question`` of a participant in ``group``."""
    with database.session() as session:
        user = make_participant(session, clock, username=f"p-{group}", group=group)
        t1 = add_task(session, clock, user, "T1", T1_ZH)
        user_id, t1_id = user.id, t1.id
    summary = ConsolidationService(database, settings, llm=LLMService([OfflineChatProvider()]), embedder=EMBEDDER,
                                   clock=clock).consolidate_task_session(t1_id)
    assert summary.status == "succeeded"
    clock.advance(days=2)
    session = database.Session()
    user = session.get(User, user_id)
    t2 = add_task(session, clock, user, "T2", [], status="in_progress", phase="chat")
    query = add_message(session, clock, t2, "user", question)
    engine = MemoryEngine(session, settings.study, embedder=EMBEDDER, clock=clock, day_seconds=settings.day_seconds)
    context = engine.build_context(user_id=user_id, memory_group=group, task_session=t2, query=query,
                                   language="zh")
    session.commit()  # as the chat service does after storing the reply; frees SQLite's write lock
    return session, context


@pytest.fixture
def run_scenario(database, settings, clock):
    sessions = []

    def run(group, **kwargs):
        session, context = scenario(database, settings, clock, group, **kwargs)
        sessions.append(session)
        return session, context

    yield run
    for session in sessions:
        session.rollback()
        session.close()


def stored(context) -> str:
    """The context as it is stored with the reply (JSON), for 'does it mention X' checks."""
    return json.dumps(context.to_dict(), ensure_ascii=False)


def test_l1_remembers_nothing(run_scenario):
    _, context = run_scenario("L1")
    assert context.get("profile") is None and context.get("recent_turns") == [] and context.get("recalled") == []
    assert not any(word in stored(context) for word in DISCLOSURES)
    assert context.render() == "（没有任何以前的记忆）"


def test_l2_keeps_only_the_last_seven_turns_of_t1(run_scenario):
    _, context = run_scenario("L2")
    assert [t["user"] for t in context.get("recent_turns")] == [u for u, _ in T1_ZH[3:]]
    assert context.get("profile") is None and context.get("recalled") == []
    text = stored(context)
    assert "博士" in text  # the fourth turn is still inside the window
    assert not any(word in text for word in ("李明", "海鲜", "猫"))  # the first three fell out
    assert "我周末喜欢去爬山。" in context.render()


def test_l3_shows_the_profile_with_task_tags_and_three_turns(run_scenario):
    _, context = run_scenario("L3")
    assert context.get("profile")["version"] == 1 and context.get("profile")["task_id"] == "T1"
    text = context.get("profile")["text"]
    assert "姓名：李明 [T1]" in text and "对海鲜过敏 [T1]" in text
    assert "养了一只猫，叫团子 [T1]" in text and "申请博士 [T1]" in text
    assert any("焦虑" in line and "[T1]" in line for line in text.splitlines())
    assert len(text) <= 500
    assert [t["user"] for t in context.get("recent_turns")] == [u for u, _ in T1_ZH[-3:]]
    assert context.get("recalled") == [] and context.get("recall_candidates") == []
    assert context.notes == []
    rendered = context.render()
    assert rendered.startswith("[用户画像]\n基本信息：姓名：李明 [T1]")


def test_l4_adds_recalled_specific_messages_with_their_probability(run_scenario, settings):
    session, context = run_scenario("L4")
    assert "对海鲜过敏 [T1]" in context.get("profile")["text"]
    assert len(context.get("recent_turns")) == 3
    [memory] = context.get("recalled")
    assert memory["text"] == "我对海鲜过敏，吃饭得特别注意。" and memory["task_id"] == "T1"
    threshold = settings.study.memory.recall.threshold
    assert memory["recalled"] and memory["p_final"] >= threshold
    assert 0.0 < memory["p"] <= memory["p_final"] <= 1.0
    assert memory["t"] == pytest.approx(2 * settings.study.memory.recall.time_scale, abs=0.01)  # two study days
    assert memory["g_after"] > memory["g_before"] >= 1.0
    assert 0.0 <= memory["r"] <= 1.0 and memory["cosine"] > 0.85
    # Every candidate considered is kept for audit, recalled or not, and matches a RecallEvent row.
    assert len(context.get("recall_candidates")) == settings.study.memory.recall.top_k
    assert sum(c["recalled"] for c in context.get("recall_candidates")) == 1
    assert all(c["p_final"] < threshold for c in context.get("recall_candidates") if not c["recalled"])
    events = session.scalars(select(RecallEvent).order_by(RecallEvent.rank)).all()
    assert [e.memory_message_id for e in events] == [c["message_id"] for c in context.get("recall_candidates")]
    assert context.get("recall_params")["preset"] == "anchored"
    assert "[想起的往事]\n[T1] 用户: 我对海鲜过敏，吃饭得特别注意。 / 助手: 明白，过敏确实要小心。" in context.render()
    # T1's closing "好的，今天就聊到这里吧。" carries no content: never a candidate, and the context says so
    assert "好的，今天就聊到这里吧。" not in [c["text"] for c in context.get("recall_candidates")]
    # the rule, and the hash of the word lists it decided with (data/recall/), as the reply records them
    assert context.get("recall_params")["candidates"] == {"min_content_words": 1, "min_salience": 0.5,
                                                          "recall_questions": False,
                                                          "word_lists": word_list_hashes()["candidate_words"]}
    assert context.get("recall_params")["word_lists"] == word_list_hashes()
    assert {"code": "excluded", "params": {"n": 1}} in context.notes


def test_l4_a_message_without_content_recalls_nothing_and_says_why(run_scenario):
    session, context = run_scenario("L4", question="嗯嗯，好的，谢谢！")
    assert context.get("recalled") == [] and context.get("recall_candidates") == []
    assert {"code": "no_content_words", "params": {}} in context.notes
    assert session.scalars(select(RecallEvent)).all() == []


def test_l4_recall_follows_the_topic(run_scenario):
    _, context = run_scenario("L4", question="我的博士申请还是让我很焦虑。")
    assert [m["text"] for m in context.get("recalled")] == ["最近在申请博士，压力很大，很焦虑。"]


def test_gist_groups_without_a_profile_say_so(database, settings, clock):
    with database.session() as session:
        user = make_participant(session, clock, username="new", group="L3")
        ts = add_task(session, clock, user, "T1", [], status="in_progress", phase="chat")
        query = add_message(session, clock, ts, "user", "你好")
        context = MemoryEngine(session, settings.study, embedder=EMBEDDER, clock=clock,
                               day_seconds=settings.day_seconds).build_context(user_id=user.id, memory_group="L3",
                                                                task_session=ts, query=query)
    assert context.get("profile") is None and context.notes == [{"code": "no_profile", "params": {}}]


def test_the_newest_profile_version_is_used(database, settings, clock):
    with database.session() as session:
        user = make_participant(session, clock, username="p", group="L3")
        t1 = add_task(session, clock, user, "T1", T1_ZH[:3]).id
        user_id = user.id
    svc = ConsolidationService(database, settings, llm=LLMService([OfflineChatProvider()]), embedder=EMBEDDER,
                               clock=clock)
    svc.consolidate_task_session(t1)
    with database.session() as session:
        t2 = add_task(session, clock, session.get(User, user_id), "T2", [("我现在不养猫了。", "好的。")]).id
    svc.consolidate_task_session(t2)
    with database.session() as session:
        t3 = add_task(session, clock, session.get(User, user_id), "T3", [], status="in_progress", phase="chat")
        context = MemoryEngine(session, settings.study, embedder=EMBEDDER, clock=clock,
                day_seconds=settings.day_seconds) \
            .build_context(user_id=user_id, memory_group="L3", task_session=t3, query=None)
    assert context.get("profile")["version"] == 2
    assert "现在不养猫了 [T2]" in context.get("profile")["text"] and "养了一只猫" not in context.get("profile")["text"]


def offline_reply(context, text: str) -> str:
    request = ChatRequest(messages=[{"role": "user", "content": text}], language=context.language,
                          memory_context=context.to_dict())
    return OfflineChatProvider().complete(request).text


def test_offline_replies_say_back_what_each_condition_remembers(run_scenario):
    question = "你还记得我吗？"
    _, l1 = run_scenario("L1", question=question)
    assert "不记得" in offline_reply(l1, question)
    _, l3 = run_scenario("L3", question=question)
    reply = offline_reply(l3, question)
    assert "你叫李明" in reply and "你对海鲜过敏" in reply and "[T1]" not in reply
    _, l4 = run_scenario("L4")
    reply = offline_reply(l4, "最近吃饭有点麻烦。")
    assert "“我对海鲜过敏，吃饭得特别注意。”" in reply


def test_offline_replies_in_english_use_the_english_profile(database, settings, clock):
    from tests.memory_factories import T1_EN

    with database.session() as session:
        user = make_participant(session, clock, username="anna", group="L3", language="en")
        t1 = add_task(session, clock, user, "T1", T1_EN).id
        user_id = user.id
    ConsolidationService(database, settings, llm=LLMService([OfflineChatProvider()]), embedder=EMBEDDER,
                         clock=clock).consolidate_task_session(t1)
    with database.session() as session:
        t2 = add_task(session, clock, session.get(User, user_id), "T2", [], status="in_progress", phase="chat")
        context = MemoryEngine(session, settings.study, embedder=EMBEDDER, clock=clock,
                day_seconds=settings.day_seconds) \
            .build_context(user_id=user_id, memory_group="L3", task_session=t2, query=None, language="en")
    reply = offline_reply(context, "Do you remember me?")
    assert "your name is Anna" in reply and "allergic to shellfish" in reply
    assert not any("\u4e00" <= c <= "\u9fff" for c in reply)


def _reply_to(context: dict, text: str) -> str:
    request = ChatRequest(messages=[{"role": "user", "content": text}], language=context["language"],
                          memory_context=context)
    return OfflineChatProvider().complete(request).text


def test_an_offline_answer_to_a_memory_question_leads_with_what_was_recalled_for_it():
    # The reply lists the first eight facts: a full profile must not push out the one memory recalled for
    # this very question (the specific the profile dropped), in either language.
    profile = {"text": "\n".join(f"喜欢第{i}件事 [T1]" for i in range(10))}
    context = {"language": "zh", "profile": profile,
               "recalled": [{"text": "我养了一只猫，叫麻薯，特别黏人。"}],
               "fragments": [{"text": "吃一点虾就会全身起疹子"}]}
    reply = _reply_to(context, "我家那个小家伙平时对我怎么样，你还记得吗？")
    assert reply.index("特别黏人") < reply.index("疹子") < reply.index("喜欢第0件事")
    english = {"language": "en", "profile": {"text": "\n".join(f"likes thing {i} [T1]" for i in range(10))},
               "recalled": [{"text": "I have a cat called Mochi who follows me everywhere."}]}
    assert "follows me everywhere" in _reply_to(english, "Do you remember how my cat behaves?")
