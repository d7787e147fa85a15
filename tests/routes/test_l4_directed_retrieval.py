"""Directed retrieval through the chat path in pilot mode (memory.recall.directed_retrieval): at T4 (16 study
days), a fact planted at T1 and never asked since is past the curve's decay bar (r would need to exceed 1); an
explicit request to remember brings it back when it is the clear best match, a control message and a question
about something never said do not."""
import pytest
from sqlalchemy import select

from database.models import Message
from tests.conftest import ApiClient
from tests.routes.test_l4_consolidation import l4_app, pilot_tasks

PERSONAS = {
    "en": {
        "T1": ["Hi, first time using this.", "I'm Tom, I work as a nurse on night shifts at a hospital in Leeds.",
               "I keep two tortoises in the garden, they're called Bert and Ernie.",
               "My sister Anna just had a baby girl called Rosie.", "I've started running in the mornings.",
               "Okay, that's all for now, bye."],
        "fact": 2,
        "T2": ["Hello again.", "Work was exhausting this week, lots of night shifts."],
        "T3": ["Hi there.", "The night shifts are still exhausting."],
        "T4": ["Do you remember what my tortoises are called?", "Can you recommend a good mystery novel?",
               "Do you remember which opera I sang in at school?"],
    },
    "zh": {
        "T1": ["你好，第一次用这个。", "我叫陈磊，在杭州一家医院做夜班护士。", "家里院子养了两只乌龟，叫大宝和二宝。",
               "我姐姐刚生了个女儿，叫朵朵。", "最近开始晨跑。", "好的，先这样，拜拜。"],
        "fact": 2,
        "T2": ["你好，又来了。", "这周上班好累，夜班太多了。"],
        "T3": ["嗨。", "夜班还是很累。"],
        "T4": ["你还记得我家乌龟叫什么吗？", "能推荐一本好看的推理小说吗？", "你还记得我上学时在哪部歌剧里唱过吗？"],
    },
}


def walk(settings, clock, study, language, directed):
    app, runtime = l4_app(settings, clock, {"directed_retrieval": {"enabled": directed}})
    persona = PERSONAS[language]
    api = ApiClient(app.test_client())
    assert api.register(f"directed_{language}_{directed}", language=language).status_code == 201
    t4 = pilot_tasks(api, clock, study, {t: persona[t] for t in ("T1", "T2", "T3", "T4")})["T4"]
    with runtime.db.Session() as session:
        planted = session.scalar(select(Message).where(Message.content == persona["T1"][persona["fact"]])).id
        contexts = [session.get(Message, reply["reply"]["id"]).memory_context for reply in t4]
    runtime.background.shutdown()
    runtime.db.dispose()
    return planted, contexts


@pytest.mark.parametrize("language", ["zh", "en"])
def test_an_explicit_request_brings_back_a_fact_past_the_decay_bar_and_nothing_else_changes(
        settings, clock, database, study, language):
    planted, (asked, control, never_said) = walk(settings, clock, study, language, directed=True)
    decision = asked["recall_params"]["directed_retrieval"]["decision"]
    assert decision["recalled"] and decision["reason"] == "clear_best_match", decision
    assert decision["message_id"] == planted
    assert [m["message_id"] for m in asked["recalled"]] == [planted]
    candidate = next(c for c in asked["recall_candidates"] if c["message_id"] == planted)
    assert candidate["recalled"] and candidate["g_after"] > candidate["g_before"]
    assert control["recalled"] == []
    assert control["recall_params"]["directed_retrieval"]["decision"]["reason"] == "no_request"
    assert never_said["recalled"] == []
    assert never_said["recall_params"]["directed_retrieval"]["decision"]["reason"] in ("below_min_r",
                                                                                       "below_min_margin")
    assert asked["recall_params"]["directed_retrieval"]["enabled"] is True
    assert asked["recall_params"]["word_lists"]["memory_requests"] == asked["recall_params"][
        "directed_retrieval"]["word_lists"]


@pytest.mark.parametrize("language", ["zh", "en"])
def test_without_directed_retrieval_the_same_request_finds_the_fact_past_its_decay_bar(
        settings, clock, database, study, language):
    planted, (asked, control, never_said) = walk(settings, clock, study, language, directed=False)
    assert asked["recalled"] == [] and control["recalled"] == [] and never_said["recalled"] == []
    assert asked["recall_candidates"][0]["message_id"] == planted  # ranked first, but the curve says no
    assert asked["recall_params"]["directed_retrieval"]["decision"] is None
