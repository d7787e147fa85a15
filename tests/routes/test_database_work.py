"""What one chat message costs the database, counted as `make serve` runs it (rate limits in the
database): the SQL statements and the pool check-outs of the request, as upper bounds. Every statement
and every check-out (a ping, and a reset when it goes back, on PostgreSQL) is CPU spent on each reply
(docs/benchmarks.md, "CPU per reply, session 6"), so a change that reads again what the request has
already loaded fails here rather than only in a benchmark."""
from __future__ import annotations

from collections import Counter

import pytest
from sqlalchemy import event

from tests.conftest import ApiClient
from tests.routes.test_chat import sse_events
from tests.routes.test_connection_pool import _settings

pytestmark = pytest.mark.postgres

# L1 (no memory of earlier tasks): the chat path alone, without a condition's own reads. Per message:
# the login's user read, the rate-limit count (which also returns what the response's X-RateLimit headers
# show: no read of its own for them), the idempotency key look-up, the running task, the participant lock,
# the message and its two activity updates; then the reply's assignment and history reads, the participant
# lock and the reply.
# Plus one since issue 28: the participant's earlier messages of the task, read before the message is stored, so
# a near-duplicate is flagged and not counted towards the minimum engagement (services.participants.quality).
STATEMENTS = 13
# the login's read, the rate-limit count, the message, the reply's prompt (read before the model answers)
# and the reply (stored after): no connection is held across the model, none taken for the headers
CHECKOUTS = 5


@pytest.fixture
def served_app(database, clock):
    from app import create_app

    # the check for a newly published study version (one query per process every STUDY_REFRESH_SECONDS) is not
    # a message's cost: kept out of the counted request
    settings = _settings(database.url)
    settings.study_refresh_seconds = 3600.0
    app = create_app(settings, clock=clock)
    runtime = app.extensions["memory_lab"]
    runtime.settings.study = runtime.study.with_overrides({"enabled_conditions": ["L1"]})
    yield app
    runtime.background.shutdown()
    runtime.record_failure.flush()
    runtime.db.dispose()


def _counted(app, send) -> tuple[Counter, list[str]]:
    engine = app.extensions["memory_lab"].db.engine
    counts: Counter = Counter()
    statements: list[str] = []

    def on_statement(_conn, _cursor, statement, *_args) -> None:
        counts["statements"] += 1
        statements.append(statement)

    def on_checkout(*_args) -> None:
        counts["checkouts"] += 1

    event.listen(engine, "before_cursor_execute", on_statement)
    event.listen(engine.pool, "checkout", on_checkout)
    try:
        send()
    finally:
        event.remove(engine, "before_cursor_execute", on_statement)
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

        counts, statements = _counted(served_app, send)
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


# L4 (issue 30): the chat path as above, plus the condition's own work for the reply. Its memory context
# reads the gist (the participant's profile and the task's recent turns); its recall is one load of the
# participant's memory state (services.memory.hybrid.ForgettingCurveSearch.load: with the participant's
# index cached in the process, one statement reads the candidate rows with the checks of that index), scoring
# without the database, and one write with the reply (the recalled memories' UPDATE and the RecallEvent
# INSERT, under the participant lock the reply holds already). Measured: 18 on SQLite and on PostgreSQL.
L4_STATEMENTS = 18
# A reply whose cached index is stale (the first after a consolidation run) reads it again: the consolidation
# runs, the memories, their replies, and the candidate rows once more.
L4_INDEX_LOAD = 4
L4_CHECKOUTS = 5  # as L1's: the recall is read with the prompt and written with the reply


@pytest.fixture
def served_l4_app(database, clock):
    from app import create_app
    from tests.routes.test_l4_consolidation import DAY_SECONDS

    settings = _settings(database.url)
    settings.study_refresh_seconds = 3600.0
    settings.day_seconds = DAY_SECONDS  # pilot mode: T2 opens two real minutes after T1
    app = create_app(settings, clock=clock)
    runtime = app.extensions["memory_lab"]
    runtime.settings.study = runtime.study.with_overrides({"enabled_conditions": ["L4"]})
    yield app
    runtime.background.shutdown()
    runtime.record_failure.flush()
    runtime.db.dispose()


def test_an_l4_reply_loads_its_memory_state_once_and_writes_its_recall_once(served_l4_app, clock, study):
    from tests.routes.test_l4_consolidation import DAY_SECONDS, PERSONAS, pilot_walk

    api = ApiClient(served_l4_app.test_client())
    assert api.register("counted_l4", language="en").status_code == 201
    pilot_walk(api, clock, study, "T1", PERSONAS["en"]["T1"])  # consolidated when it ends
    clock.advance(2 * DAY_SECONDS + 1)
    assert api.post("/api/tasks/T2/start").status_code == 201
    messages = ["Do you remember what I'm allergic to?", "Which food was it again that I have an allergy to?",
                "And how are my tortoises Bert and Ernie doing in the garden?"]
    for number, text in enumerate(messages):
        clock.advance(0.1)  # pilot mode: a task lasts about a real second
        answers = []

        def send(text=text, number=number, answers=answers) -> None:
            answers.append(api.post("/api/tasks/T2/messages", json={"content": text},
                                    headers={"Idempotency-Key": f"counted-l4-{number}"}))

        counts, statements = _counted(served_l4_app, send)
        assert answers[0].status_code == 201, answers[0].get_json()
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
