"""The rehearsal route through the chat path in pilot mode (memory.recall.rehearsal_route): a fact planted at T1 is
recalled at T2 by a request about it; at T3 a request that resembles the T2 request, and not the T1 statement, brings
the fact back through the T2 exchange, on the fact's own (consolidated) curve. With the route off the same T3
request leaves the fact out; a control at T3 recalls nothing either way."""
import pytest
from sqlalchemy import select

from database.models import Message, RecallEvent
from tests.conftest import ADMIN_PASSWORD, ApiClient
from tests.routes.test_l4_consolidation import l4_app, pilot_tasks

PERSONAS = {
    "en": {
        "T1": ["Hi, first time using this.", "I'm Lena, I teach chemistry at a secondary school in Bristol.",
               "On weekends I play bass in a band called Static Bloom, we do small pub gigs.",
               "My brother just moved to Canada for work.", "I've been trying to drink less coffee.",
               "Okay, that's all for now, bye."],
        "fact": 2,
        "T2": ["Hello again.", "Do you remember the name of my band? We need a poster for our gig on Saturday."],
        "T3": ["Hi there.", "For Saturday's gig, can you help me put nine songs in order for a 35 minute slot?",
               "What's a good way to keep basil alive on a windowsill?"],
    },
    "zh": {
        "T1": ["你好，第一次用这个。", "我叫林静，在成都一所中学教化学。",
               "周末我在一个叫“静电花”的乐队弹贝斯，常在小酒馆演出。",
               "我哥哥刚去加拿大工作了。", "最近在努力少喝点咖啡。", "好的，先这样，拜拜。"],
        "fact": 2,
        "T2": ["你好，又来了。", "你还记得我们乐队叫什么吗？周六演出要做一张海报。"],
        "T3": ["嗨。", "周六的演出，帮我把九首歌排个顺序吧，一共35分钟。", "窗台上的罗勒怎么养才不会死？"],
    },
}


def walk(settings, clock, study, language, route):
    from services.participants.account_service import create_admin

    app, runtime = l4_app(settings, clock, {"rehearsal_route": {"enabled": route}})
    persona = PERSONAS[language]
    api = ApiClient(app.test_client())
    registered = api.register(f"rehearsal_{language}_{route}", language=language)
    assert registered.status_code == 201
    replies = pilot_tasks(api, clock, study, {t: persona[t] for t in ("T1", "T2", "T3")})
    t2, t3 = replies["T2"], replies["T3"]
    with runtime.db.Session() as session:
        planted = session.scalar(select(Message).where(Message.content == persona["T1"][persona["fact"]])).id
        asked_t2 = t2[1]["message"]["id"]
        contexts = {"T2": session.get(Message, t2[1]["reply"]["id"]).memory_context,
                    "T3": [session.get(Message, reply["reply"]["id"]).memory_context for reply in t3[1:]]}
        events = session.scalars(select(RecallEvent).where(RecallEvent.query_message_id == t3[1]["message"]["id"],
                                                           RecallEvent.memory_message_id == planted)).all()
        create_admin(session, "labadmin", ADMIN_PASSWORD, runtime.clock)
    admin = ApiClient(app.test_client())
    assert admin.login("labadmin", ADMIN_PASSWORD).status_code == 200
    record = admin.get(f"/api/admin/participants/{registered.get_json()['user']['id']}").get_json()
    # what the admin's participant page shows of the T3 request's recall of the fact
    shown = [e for e in record["recall_events"]
             if e["query_message_id"] == t3[1]["message"]["id"] and e["memory_message_id"] == planted]
    runtime.background.shutdown()
    runtime.db.dispose()
    return planted, asked_t2, contexts, events, shown


@pytest.mark.parametrize("language", ["zh", "en"])
def test_a_fact_recalled_at_t2_comes_back_at_t3_through_the_t2_exchange(settings, clock, database, study, language):
    planted, asked_t2, contexts, events, shown = walk(settings, clock, study, language, route=True)
    assert planted in [m["message_id"] for m in contexts["T2"]["recalled"]]  # the rehearsal
    request, control = contexts["T3"]
    fact = next(c for c in request["recall_candidates"] if c["message_id"] == planted)
    rehearsal = next(c for c in request["recall_candidates"] if c["message_id"] == asked_t2)
    assert fact["recalled"] and fact["recalled_by"] == "rehearsal", request["recall_params"]["rehearsal_route"]
    assert fact["via_message_id"] == asked_t2 and fact["via_r"] == rehearsal["r"] > fact["r"]
    assert fact["via_p_final"] >= request["recall_params"]["threshold"] > fact["p_final"]
    assert fact["g_after"] > fact["g_before"]  # consolidated as any recall is
    assert planted in [m["message_id"] for m in request["recalled"]]
    decision = next(d for d in request["recall_params"]["rehearsal_route"]["decisions"] if d["message_id"] == planted)
    assert decision["reason"] == "reached" and decision["via_message_id"] == asked_t2
    assert [(e.recalled, e.recalled_by, e.via_message_id) for e in events] == [(True, "rehearsal", asked_t2)]
    assert [(e["recalled"], e["recalled_by"], e["via_message_id"]) for e in shown] == [(True, "rehearsal", asked_t2)]
    assert planted not in [m["message_id"] for m in control["recalled"]]


def test_without_the_route_the_t3_request_leaves_the_fact_out(settings, clock, database, study):
    # one language: with the rule off no decision is taken, whatever the language
    planted, asked_t2, contexts, events, shown = walk(settings, clock, study, "en", route=False)
    assert planted in [m["message_id"] for m in contexts["T2"]["recalled"]]
    request, control = contexts["T3"]
    assert planted not in [m["message_id"] for m in request["recalled"]]
    assert request["recall_params"]["rehearsal_route"] == {"enabled": False, "decisions": None}
    assert [(e.recalled, e.recalled_by, e.via_message_id) for e in events] in ([], [(False, None, None)])
    assert planted not in [m["message_id"] for m in control["recalled"]]


@pytest.mark.postgres
def test_0025_says_what_recalled_each_earlier_event_from_the_replies_stored_contexts(settings, clock, database, study):
    """Recall events written before 0025 get ``recalled_by`` from their reply's memory context: the memory the
    directed-retrieval decision brought back is "directed", every other recalled one "curve", the rest empty."""
    from alembic import command
    from sqlalchemy import inspect, text

    from database.db_manager import alembic_config
    from tests.routes.test_l4_directed_retrieval import walk as directed_walk

    planted, (asked, _control, _never_said) = directed_walk(settings, clock, study, "en", True)
    assert asked["recall_params"]["directed_retrieval"]["decision"]["message_id"] == planted
    config = alembic_config(settings.database_url)
    command.downgrade(config, "0024")  # the columns go, the events stay
    assert "recalled_by" not in {c["name"] for c in inspect(database.engine).get_columns("recall_events")}
    command.upgrade(config, "0025")
    with database.engine.connect() as conn:
        rows = conn.execute(text("SELECT memory_message_id, recalled, recalled_by, via_message_id "
                                 "FROM recall_events")).all()
    recalled = {(memory, by) for memory, was, by, _via in rows if was}
    assert (planted, "directed") in recalled
    assert {by for memory, by in recalled if memory != planted} <= {"curve"}
    assert {by for _memory, was, by, _via in rows if not was} == {None}
    assert {via for *_rest, via in rows} == {None}
    command.upgrade(config, "head")
