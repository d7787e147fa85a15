"""The rows ``insert_held`` and the message's insert hand back are built from the values sent and the columns the
insert returns (``participant_lock.attach``), not read back: each must equal the row as stored, column by column
and type by type, on both databases, for a message and its reply (JSON and streamed), in L1 and in L4's second
task, whose reply carries a memory context, a prompt with earlier turns, recall attempts and an exposure."""
from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest

import database.participant_lock as participant_lock
import services.chat.chat_service as chat_service
from database.models import Message
from tests.conftest import ApiClient
from tests.routes.test_chat import sse_events
from tests.routes.test_database_work import _served

pytestmark = pytest.mark.postgres


@pytest.fixture
def attached(monkeypatch) -> list[Any]:
    """Every instance ``attach`` builds while the test runs."""
    built: list[Any] = []
    real = participant_lock.attach

    def spy(session, model, values, row):
        built.append(instance := real(session, model, values, row))
        return instance

    monkeypatch.setattr(participant_lock, "attach", spy)
    monkeypatch.setattr(chat_service, "attach", spy)
    return built


def _assert_as_stored(app, instances: list[Any]) -> None:
    assert instances
    columns = Message.__table__.c
    with app.extensions["memory_lab"].db.Session() as session:
        for built in instances:
            stored = session.get(Message, built.id)
            for column in columns:
                mine, theirs = getattr(built, column.key), getattr(stored, column.key)
                assert mine == theirs, (column.key, mine, theirs)
                # the same type too: an int sent to a float column, a tuple to a JSON one would compare equal
                assert type(mine) is type(theirs), (column.key, type(mine), type(theirs))
                if isinstance(mine, (dict, list)):
                    assert repr(mine) == repr(theirs), column.key  # the same nesting and types throughout


def _one_of_each(api, clock, task_id: str, texts: tuple[str, str], step: float = 5.0) -> None:
    clock.advance(step)
    answered = api.post(f"/api/tasks/{task_id}/messages", json={"content": texts[0], "typing_ms": 4200,
                                                                "keystrokes": 31, "input_kind": "typed"},
                        headers={"Idempotency-Key": f"{task_id}-json"})
    assert answered.status_code == 201, answered.get_json()
    clock.advance(step)
    events = sse_events(api.post(f"/api/tasks/{task_id}/messages?stream=1", json={"content": texts[1]}))
    assert events[-1][0] == "reply", events[-1]


@pytest.fixture
def l1_app(database, clock):
    yield from _served(database, clock, "L1")


def test_l1_messages_and_replies_are_attached_as_stored(l1_app, clock, attached):
    api = ApiClient(l1_app.test_client())
    assert api.register("attached_l1").status_code == 201
    assert api.post("/api/tasks/T1/start").status_code == 201
    _one_of_each(api, clock, "T1", ("我周末去爬山了。", "山上很冷，我忘了带外套。"))
    assert [m.role for m in attached] == ["user", "assistant"] * 2
    assert all(isinstance(m.created_at, datetime) and m.recall_count == 0 for m in attached)
    _assert_as_stored(l1_app, attached)


@pytest.fixture
def l4_app(database, clock):
    from tests.routes.test_l4_consolidation import DAY_SECONDS

    yield from _served(database, clock, "L4", day_seconds=DAY_SECONDS)


def test_an_l4_reply_with_its_memory_context_is_attached_as_stored(l4_app, clock, study, attached):
    from tests.routes.test_l4_consolidation import DAY_SECONDS, PERSONAS, pilot_walk

    api = ApiClient(l4_app.test_client())
    assert api.register("attached_l4", language="en").status_code == 201
    pilot_walk(api, clock, study, "T1", PERSONAS["en"]["T1"])
    clock.advance(2 * DAY_SECONDS + 1)
    assert api.post("/api/tasks/T2/start").status_code == 201
    attached.clear()
    # pilot mode: a task lasts about a real second
    _one_of_each(api, clock, "T2", ("Do you remember what I'm allergic to?", "And how are my tortoises doing?"),
                 step=0.1)
    replies = [m for m in attached if m.role == "assistant"]
    assert len(replies) == 2 and all(m.memory_context and m.prompt and m.memory_exposure for m in replies)
    _assert_as_stored(l4_app, attached)
