"""L4 consolidates as the seed says (issue 27, part 2): a memory recalled at T2 decays more slowly, so the same
fact asked about in other words at T3 is recalled again, under the default preset, through the chat path in
pilot mode (PILOT_DAY_SECONDS)."""
import math
from datetime import timedelta

import pytest
from sqlalchemy import select

from database.models import Message, RecallEvent
from tests.conftest import ApiClient, answer_for

DAY_SECONDS = 60.0  # pilot mode: one study day per real minute


def pilot_walk(api, clock, study, task_id, messages):
    """One task through the API in pilot mode: the study's timer runs DAY_SECONDS / 86400 as fast."""
    scale = DAY_SECONDS / 86400
    assert api.post(f"/api/tasks/{task_id}/start").status_code == 201
    step = min(study.timing.min_active_seconds / len(messages) + 1, study.timing.idle_gap_seconds - 1) * scale
    replies = []
    for text in messages:
        clock.advance(step)
        response = api.post(f"/api/tasks/{task_id}/messages", json={"content": text})
        assert response.status_code == 201, response.get_json()
        replies.append(response.get_json())
    while (response := api.post(f"/api/tasks/{task_id}/finish")).status_code != 200:
        assert response.get_json()["error"] == "too_early"
        clock.advance((study.timing.idle_gap_seconds - 1) * scale)
    items = api.get(f"/api/tasks/{task_id}/questionnaire").get_json()["items"]
    assert api.post(f"/api/tasks/{task_id}/questionnaire",
                    json={"answers": {i["id"]: answer_for(i) for i in items}}).status_code == 201
    return replies


def _second():
    return timedelta(seconds=1)


def l4_app(settings, clock, recall=None):
    """An app in pilot mode (DAY_SECONDS) whose study assigns L4 only, with ``recall`` merged into
    ``memory.recall``; returns the app and its runtime."""
    from app import create_app

    settings.day_seconds = DAY_SECONDS
    app = create_app(settings, clock=clock)
    runtime = app.extensions["memory_lab"]
    overrides = {"enabled_conditions": ["L4"], **({"memory": {"recall": recall}} if recall else {})}
    runtime.settings.study = runtime.study.with_overrides(overrides)
    return app, runtime


def pilot_tasks(api, clock, study, script):
    """T1 and then each later task of ``script`` when it unlocks (its offset in study days after T1 ends), in pilot
    mode; returns each task's replies."""
    replies = {"T1": pilot_walk(api, clock, study, "T1", script["T1"])}
    t1_done = clock.now()
    for task in study.tasks:
        if task.id != "T1" and task.id in script:
            clock.set(t1_done + task.unlock_offset_days * DAY_SECONDS * _second())
            replies[task.id] = pilot_walk(api, clock, study, task.id, script[task.id])
    return replies


PERSONAS = {
    "en": {
        "T1": ["Hi, first time using this.", "I'm Tom, I work as a nurse on night shifts at a hospital in Leeds.",
               "I'm allergic to peanuts, I carry an EpiPen everywhere since a bad reaction at a wedding.",
               "My sister Anna just had a baby girl called Rosie.", "The weather has been grim all week.",
               "I've started running in the mornings, trying to do a 10k in spring.",
               "I keep two tortoises in the garden, they're called Bert and Ernie.",
               "Also thinking about learning Spanish before a trip to Seville.", "Okay, that's all for now, bye."],
        "fact": 2,
        "T2": ["Hello again.", "Do you remember what I'm allergic to?", "Work was exhausting this week."],
        "T3": ["Hi.", "Which food was it again that I have an allergy to? I forgot what I told you.", "Thanks."],
    },
    "zh": {
        "T1": ["你好，第一次用这个。", "我叫陈磊，在杭州一家医院做夜班护士。",
               "我对花生过敏，上次在婚礼上吃错东西进了急诊，现在随身带着肾上腺素笔。",
               "我姐姐刚生了个女儿，叫朵朵。", "这周天气一直很差。", "最近开始晨跑，想明年春天跑个十公里。",
               "家里院子养了两只乌龟，叫大宝和二宝。", "还打算出国前学点西班牙语。", "好的，先这样，拜拜。"],
        "fact": 2,
        "T2": ["你好，又来了。", "你还记得我对什么过敏吗？", "这周上班好累。"],
        "T3": ["嗨。", "我之前跟你提过我对一种食物过敏，是哪种来着？", "谢谢。"],
    },
}


# The languages differ in their text (jieba, the e5 model's work), not in SQL: the PostgreSQL pass walks one.
@pytest.mark.parametrize("language", ["zh", pytest.param("en", marks=pytest.mark.postgres)])
def test_a_fact_recalled_at_t2_is_recalled_again_when_asked_in_other_words_at_t3(settings, clock, database,
                                                                                  study, language):
    app, runtime = l4_app(settings, clock)
    try:
        assert runtime.study.memory.recall.preset == "anchored"  # the default preset, unchanged
        persona = PERSONAS[language]
        api = ApiClient(app.test_client())
        assert api.register(f"spacing_{language}", language=language).status_code == 201
        replies = pilot_tasks(api, clock, study, {t: persona[t] for t in ("T1", "T2", "T3")})
        t2, t3 = replies["T2"], replies["T3"]
        with runtime.db.Session() as session:
            planted = session.scalar(select(Message).where(Message.content == persona["T1"][persona["fact"]]))

            def recalled(reply):
                context = session.get(Message, reply["reply"]["id"]).memory_context
                return {m["message_id"]: m for m in context["recalled"]}, context

            at_t2, _ = recalled(t2[1])
            at_t3, context = recalled(t3[1])
            assert planted.id in at_t2, "the explicit question at T2 brings the fact back"
            assert planted.id in at_t3, "asked again in other words at T3, the consolidated fact comes back"
            first, again = at_t2[planted.id], at_t3[planted.id]
            alpha = runtime.study.memory.recall.g_update_salience
            s2 = (1 - math.exp(-first["spacing_days"])) / (1 + math.exp(-first["spacing_days"]))
            assert first["spacing_days"] == pytest.approx(2.0, abs=0.1)  # study days since consolidation
            assert first["g_after"] == pytest.approx(first["g_before"] + s2 * (1 + alpha * first["salience"]),
                                                     abs=1e-6)
            assert first["g_after"] - first["g_before"] > 0.7  # the seed's gain, not the scaled one's 0.02
            assert again["g_before"] == pytest.approx(first["g_after"])
            assert again["spacing_days"] == pytest.approx(7.0, abs=0.1)  # since the T2 recall
            assert context["recall_params"]["spacing_unit"] == "days"
            assert context["recall_params"]["preset"] == "anchored"
            stored = session.scalars(select(RecallEvent).where(RecallEvent.memory_message_id == planted.id,
                                                               RecallEvent.recalled)).all()
            assert [e.task_id for e in stored] == ["T2", "T3"]
            assert planted.recall_count == 2
    finally:
        runtime.background.shutdown()
        runtime.db.dispose()
