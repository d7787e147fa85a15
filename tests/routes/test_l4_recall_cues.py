"""Recall cues through the chat path in pilot mode (issue 27 part 3, docs/recall_round11.md "Session 14"): the
message that recalled a memory at T2 becomes, once T2 is consolidated, one of the memory's cues, so a T3 request
that resembles the T2 message more than the T1 statement reaches the memory through it. With the cues off the
same walk does not bring the fact back at T3."""
from datetime import timedelta

import pytest
from sqlalchemy import select

from database.models import Message
from tests.conftest import ApiClient
from tests.routes.test_l4_consolidation import DAY_SECONDS, pilot_walk

T1 = ["Hi, first time using this.", "I'm Tom, I work as a nurse on night shifts at a hospital in Leeds.",
      "I'm allergic to peanuts, I carry an EpiPen everywhere since a bad reaction at a wedding.",
      "My sister Anna just had a baby girl called Rosie.", "The weather has been grim all week.",
      "I've started running in the mornings, trying to do a 10k in spring.",
      "I keep two tortoises in the garden, they're called Bert and Ernie.",
      "Also thinking about learning Spanish before a trip to Seville.", "Okay, that's all for now, bye."]
FACT = 2
T2 = ["Hello again.", "Do you remember what I'm allergic to? We're booking the Thai place for my birthday.",
      "Work was exhausting this week."]
T3 = ["Hi.", "The Thai place for my birthday is booked, which dishes should I stay away from?", "Thanks."]


@pytest.mark.postgres
@pytest.mark.parametrize("cues", [True, False])
def test_a_request_like_the_message_that_recalled_a_memory_reaches_it_through_that_cue(settings, clock, database,
                                                                                      study, cues):
    from app import create_app

    settings.day_seconds = DAY_SECONDS
    app = create_app(settings, clock=clock)
    runtime = app.extensions["memory_lab"]
    try:
        runtime.settings.study = runtime.study.with_overrides(
            {"enabled_conditions": ["L4"], "memory": {"recall": {"keep_recall_cues": cues}}})
        assert runtime.study.memory.recall.keep_recall_cues is cues
        api = ApiClient(app.test_client())
        assert api.register(f"cues_{cues}", language="en").status_code == 201
        pilot_walk(api, clock, study, "T1", T1)
        t1_done = clock.now()
        clock.set(t1_done + timedelta(seconds=2 * DAY_SECONDS))
        t2 = pilot_walk(api, clock, study, "T2", T2)
        clock.set(t1_done + timedelta(seconds=9 * DAY_SECONDS))
        t3 = pilot_walk(api, clock, study, "T3", T3)
        with runtime.db.Session() as session:
            planted = session.scalar(select(Message).where(Message.content == T1[FACT]))
            probe = session.scalar(select(Message).where(Message.content == T2[1]))

            def context(reply):
                return session.get(Message, reply["reply"]["id"]).memory_context

            at_t2, at_t3 = context(t2[1]), context(t3[1])
            assert at_t3["recall_params"]["keep_recall_cues"] is cues
            assert planted.id in {m["message_id"] for m in at_t2["recalled"]}, "the explicit question recalls it"
            recalled = {m["message_id"]: m for m in at_t3["recalled"]}
            if cues:
                assert planted.id in recalled, "the T3 request reaches the fact through the T2 question"
                assert recalled[planted.id]["cue_message_id"] == probe.id
            else:
                assert planted.id not in recalled, "without the cue the T3 request does not bring the fact back"
                assert all(c["cue_message_id"] is None for c in at_t3["recall_candidates"])
    finally:
        runtime.background.shutdown()
        runtime.db.dispose()
