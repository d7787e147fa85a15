"""What one chat message costs the database, counted as `make serve` runs it (rate limits in the
database): the SQL statements and the pool check-outs of the request, as upper bounds. Every statement
and every check-out (a ping, and a reset when it goes back, on PostgreSQL) is CPU spent on each reply
(docs/benchmarks.md, "CPU per reply, session 6"), so a change that reads again what the request has
already loaded fails here rather than only in a benchmark."""
from __future__ import annotations

from collections import Counter

import pytest
from sqlalchemy import event, select

from tests.conftest import ApiClient
from tests.routes.test_chat import sse_events
from tests.routes.test_connection_pool import _settings

pytestmark = pytest.mark.postgres

# L1 (no memory of earlier tasks): the chat path alone, without a condition's own reads. Per message, in one
# transaction on one connection (the login's read begins it, the message's commit ends it, before the model):
#   1. the login's read of the participant, with their assignment joined (the memory group of the prompt)
#   2. the rate-limit count, whose RETURNING fills the X-RateLimit headers (no read of its own for them)
#   3. the running task
#   4. the participant's lock, which also sets last_active_at (UPDATE users ... RETURNING status)
#   5. the task's activity (UPDATE task_sessions)
#   6. the task's messages so far: the near-duplicate check (issue 28) and the reply's history, read once
#   7. the message: INSERT ... ON CONFLICT DO NOTHING RETURNING, so the idempotency key needs no look-up first
# then, after the model, on a second connection:
#   8. the reply with the participant's lock in the same statement (INSERT ... SELECT ... FROM users)
STATEMENTS = 8
# the request's (login, count, message: the prompt needs no read of its own) and the reply's (after the
# model): no connection is held across the model, none taken for the headers
CHECKOUTS = 2


@pytest.fixture
def served_app(database, clock):
    yield from _served(database, clock, "L1")


def _served(database, clock, condition: str, **settings_overrides):
    """The app as `make serve` runs it, with only ``condition`` enabled, stopped after the test."""
    from app import create_app

    # the check for a newly published study version (one query per process every STUDY_REFRESH_SECONDS) is not
    # a message's cost: kept out of the counted request
    settings = _settings(database.url)
    settings.study_refresh_seconds = 3600.0
    for name, value in settings_overrides.items():
        setattr(settings, name, value)
    app = create_app(settings, clock=clock)
    runtime = app.extensions["memory_lab"]
    runtime.settings.study = runtime.study.with_overrides({"enabled_conditions": [condition]})
    yield app
    runtime.background.shutdown()
    runtime.record_failure.flush()
    runtime.db.dispose()


def _counted(app, send, timeline: list[str] | None = None) -> tuple[Counter, list[str]]:
    """What ``send`` cost: the counts and its statements; ``timeline`` receives the statements with a ``COMMIT``
    where a transaction ended."""
    timeline = [] if timeline is None else timeline
    engine = app.extensions["memory_lab"].db.engine
    counts: Counter = Counter()
    statements: list[str] = []

    def on_statement(_conn, _cursor, statement, *_args) -> None:
        counts["statements"] += 1
        statements.append(statement)
        timeline.append(statement)

    def on_checkout(*_args) -> None:
        counts["checkouts"] += 1

    def on_commit(*_args) -> None:
        timeline.append("COMMIT")

    event.listen(engine, "before_cursor_execute", on_statement)
    event.listen(engine, "commit", on_commit)
    event.listen(engine.pool, "checkout", on_checkout)
    try:
        send()
    finally:
        event.remove(engine, "before_cursor_execute", on_statement)
        event.remove(engine, "commit", on_commit)
        event.remove(engine.pool, "checkout", on_checkout)
    return counts, statements


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_a_message_and_its_reply_stay_within_their_statements_and_checkouts(served_app, clock, stream):
    api = ApiClient(served_app.test_client())
    assert api.register("counted").status_code == 201
    assert api.post("/api/tasks/T1/start").status_code == 201
    for number in range(3):  # the reply to a later message, with a history to read
        clock.advance(5)
        path = "/api/tasks/T1/messages" + ("?stream=1" if stream else "")
        answers = []

        def send(path=path, number=number, answers=answers) -> None:
            response = api.post(path, json={"content": f"第{number}条消息。"},
                                headers={"Idempotency-Key": f"counted-{stream}-{number}"})
            answers.append(sse_events(response)[-1][0] if stream else response.status_code)

        with_commits: list[str] = []
        counts, statements = _counted(served_app, send, with_commits)
        assert answers == ["reply" if stream else 201]
        assert counts["statements"] <= STATEMENTS, statements
        assert counts["checkouts"] <= CHECKOUTS, counts
        # the reply goes on with the message, the participant and the task the request loaded: their
        # rows are read once (the participant's by the login), not again for the prompt
        rows = [s for s in statements if s.lstrip().upper().startswith("SELECT")]
        assert sum("users.username" in s for s in rows) == 1, rows
        assert sum("task_sessions.attempt" in s for s in rows) == 1, rows
        assert not any("WHERE messages.id =" in s for s in rows), rows
        # the headers come from the count's own RETURNING: no read of rate_limit_counters after it
        assert not any("FROM rate_limit_counters" in s for s in rows), rows
        # the count and the message commit together: one transaction, no commit between them
        count = next(i for i, s in enumerate(with_commits) if "INSERT INTO rate_limit_counters" in s)
        stored = next(i for i, s in enumerate(with_commits) if s.lstrip().startswith("INSERT INTO messages"))
        assert count < stored and "COMMIT" not in with_commits[count:stored], with_commits


def test_a_refused_message_is_counted_all_the_same(served_app, clock):
    """The count goes back with a refused request's transaction: it is made again on its own, so refusals
    (an empty message here) and repeats still use up the limit."""
    from database.models import RateLimitCounter

    api = ApiClient(served_app.test_client())
    assert api.register("refused").status_code == 201
    assert api.post("/api/tasks/T1/start").status_code == 201
    counters = served_app.extensions["memory_lab"].db

    def message_counts() -> list[int]:
        with counters.Session() as session:
            return list(session.scalars(select(RateLimitCounter.count).where(
                RateLimitCounter.key.contains("post_message"))))

    assert api.post("/api/tasks/T1/messages", json={"content": "   "}).status_code == 400
    assert message_counts() == [1]
    keyed = {"Idempotency-Key": "refused-1"}
    assert api.post("/api/tasks/T1/messages", json={"content": "第一条。"}, headers=keyed).status_code == 201
    assert message_counts() == [2]
    # a repeat stores nothing (its transaction is rolled back) and is counted all the same
    repeat = api.post("/api/tasks/T1/messages", json={"content": "第一条。"}, headers=keyed)
    assert repeat.status_code == 201 and repeat.headers["Idempotent-Replayed"] == "true"
    assert message_counts() == [3]


# L4 (issue 30): the chat path as above, plus the condition's own work for the reply. Its memory context
# reads the gist (the participant's profile and the task's recent turns); its recall is one load of the
# participant's memory state (services.memory.hybrid.ForgettingCurveSearch.load: with the participant's
# index cached in the process, one statement reads the candidate rows with the checks of that index), scoring
# without the database, and one write with the reply (the recalled memories' UPDATE and the RecallEvent
# INSERT, under the participant lock the reply holds already); its earlier turns come with the task so far.
# Measured: 13 on SQLite and on PostgreSQL (14 while the reply read the earlier turns on its own).
L4_STATEMENTS = 13
# A reply whose cached index is stale (the first after a consolidation run) reads it again: the consolidation
# runs, the memories, their replies, and the candidate rows once more.
L4_INDEX_LOAD = 4
L4_CHECKOUTS = 3  # measured on both databases (an L1 message takes 2)


def _counted_t2_messages(app, clock, study, username: str, messages: list[str]):
    """Register ``username`` (English), walk T1 in pilot mode, open T2 two study days later, then send each of
    ``messages`` there; yields (number, the response, counts, statements) for each, as ``_counted`` gives them."""
    from tests.routes.test_l4_consolidation import DAY_SECONDS, PERSONAS, pilot_walk

    api = ApiClient(app.test_client())
    assert api.register(username, language="en").status_code == 201
    pilot_walk(api, clock, study, "T1", PERSONAS["en"]["T1"])  # consolidated when it ends
    clock.advance(2 * DAY_SECONDS + 1)
    assert api.post("/api/tasks/T2/start").status_code == 201
    for number, text in enumerate(messages):
        clock.advance(0.1)  # pilot mode: a task lasts about a real second
        answers = []

        def send(text=text, number=number, answers=answers) -> None:
            answers.append(api.post("/api/tasks/T2/messages", json={"content": text},
                                    headers={"Idempotency-Key": f"{username}-{number}"}))

        counts, statements = _counted(app, send)
        assert answers[0].status_code == 201, answers[0].get_json()
        yield number, counts, statements


@pytest.fixture
def served_l4_app(database, clock):
    from tests.routes.test_l4_consolidation import DAY_SECONDS

    # pilot mode: T2 opens two real minutes after T1
    yield from _served(database, clock, "L4", day_seconds=DAY_SECONDS)


def test_an_l4_reply_loads_its_memory_state_once_and_writes_its_recall_once(served_l4_app, clock, study):
    messages = ["Do you remember what I'm allergic to?", "Which food was it again that I have an allergy to?",
                "And how are my tortoises Bert and Ernie doing in the garden?"]
    for number, counts, statements in _counted_t2_messages(served_l4_app, clock, study, "counted_l4", messages):
        stale = number == 0  # the index cached during T1 predates T1's consolidation
        assert counts["statements"] <= L4_STATEMENTS + (L4_INDEX_LOAD if stale else 0), statements
        assert counts["checkouts"] <= L4_CHECKOUTS, counts
        # one load: the candidate rows with the index's checks, in one statement (twice when stale)
        loads = [s for s in statements if s.lstrip().startswith("SELECT state.")]
        assert len(loads) == (2 if stale else 1), statements
        index_reads = [s for s in statements if s.lstrip().startswith("SELECT count(consolidation_runs.id)")]
        assert len(index_reads) == (1 if stale else 0), statements
        # one write: the recalled memories and the events, each one statement (something is recalled)
        assert sum(s.lstrip().startswith("UPDATE messages SET consolidation_g") for s in statements) == 1, statements
        assert sum(s.lstrip().startswith("INSERT INTO recall_events") for s in statements) == 1, statements


# L2 and L3 (and L4 above) show verbatim turns of earlier tasks: storing the message reads them with the task so
# far, in the same statement (memory.context.read_task_and_earlier_turns), so the reply's context reads none of its
# own. L2 adds nothing else to L1's path: the same 8 statements and 2 check-outs.
L2_STATEMENTS = STATEMENTS


@pytest.fixture
def served_l2_app(database, clock):
    from tests.routes.test_l4_consolidation import DAY_SECONDS

    yield from _served(database, clock, "L2", day_seconds=DAY_SECONDS)


def test_an_l2_reply_reads_the_earlier_turns_with_the_task_so_far(served_l2_app, clock, study):
    from database.models import Message, TaskSession
    from services.memory.context import earlier_turns

    messages = ["Do you remember what I told you last time?", "What else did I say?"]
    for _, counts, statements in _counted_t2_messages(served_l2_app, clock, study, "counted_l2", messages):
        assert counts["statements"] <= L2_STATEMENTS, statements
        assert counts["checkouts"] <= CHECKOUTS, counts
        reads = [s for s in statements if s.lstrip().upper().startswith("SELECT") and "FROM messages" in s]
        assert len(reads) == 1 and "UNION ALL" in reads[0], reads
    # the context the reply stored holds the same turns as a read of its own gives
    db = served_l2_app.extensions["memory_lab"].db
    with db.Session() as session:
        reply = session.scalars(select(Message).where(Message.role == "assistant", Message.task_id == "T2")
                                .order_by(Message.id.desc())).first()
        ts = session.get(TaskSession, reply.task_session_id)
        turns = earlier_turns(session, reply.user_id, ts)
        window = study.conditions["L2"].recent_turns
        stored = reply.memory_context["recent_turns"]
    assert turns and stored == turns[-window:]
