"""Questionnaires at the service level: items from the study, server-side validation, storage."""
from __future__ import annotations

import pytest
from sqlalchemy import select

from database.models import QuestionnaireResponse
from services.participants.account_service import register
from services.platform.errors import BadInput
from services.study.questionnaire_service import items_for_task, store_answers, validate_answers
from services.study.timer_service import TaskService
from tests.conftest import answer_for

MAX_TEXT = 50


def item(item_id: str, kind: str, **extra) -> dict:
    """An item as ``items_for_task`` returns it."""
    return {"id": item_id, "instrument": "probe", "instrument_title": "Probe", "type": kind,
            "required": extra.pop("required", kind != "text"), "min": extra.pop("min", None),
            "max": extra.pop("max", None), "options": extra.pop("options", None), "text": item_id, **extra}


ITEMS = [
    item("scale", "likert", min=1, max=7),
    item("closeness", "ios", min=1, max=7),
    item("pick", "choice", options=[{"value": "a", "label": "A"}, {"value": "b", "label": "B"}]),
    item("note", "text"),
]


def test_items_follow_the_tasks_instruments_in_the_participants_language(study):
    task = study.tasks[0]

    zh, en = items_for_task(study, task, "zh"), items_for_task(study, task, "en")

    expected = [i["id"] for name in task.questionnaire for i in study.instruments[name].items]
    assert [i["id"] for i in zh] == expected == [i["id"] for i in en]
    assert {i["instrument"] for i in zh} == set(task.questionnaire)
    assert all(i["type"] in ("likert", "ios", "choice", "text") for i in zh)
    assert any(a["text"] != b["text"] for a, b in zip(zh, en, strict=True))  # translated, not copied


def test_valid_answers_are_kept_text_stripped_and_an_empty_optional_text_dropped():
    cleaned = validate_answers(ITEMS, {"scale": 7, "closeness": 1, "pick": "b", "note": "  fine  "}, MAX_TEXT)
    assert cleaned == {"scale": 7, "closeness": 1, "pick": "b", "note": "fine"}
    assert "note" not in validate_answers(ITEMS, {"scale": 1, "closeness": 1, "pick": "a", "note": " "}, MAX_TEXT)


def test_every_real_item_accepts_a_valid_answer(study):
    items = items_for_task(study, study.tasks[0], "zh")
    answers = {i["id"]: answer_for(i) for i in items}
    assert set(validate_answers(items, answers, MAX_TEXT)) == set(answers)


@pytest.mark.parametrize("answers", [None, [], "scale=3", 7])
def test_answers_that_are_not_an_object_are_refused(answers):
    with pytest.raises(BadInput) as refused:
        validate_answers(ITEMS, answers, MAX_TEXT)
    assert refused.value.code == "invalid_answers"


def test_every_bad_item_is_named_with_its_problem():
    answers = {"scale": 8, "closeness": True, "pick": "c", "note": "x" * (MAX_TEXT + 1), "extra": 1}

    with pytest.raises(BadInput) as refused:
        validate_answers(ITEMS, answers, MAX_TEXT)

    assert refused.value.details["items"] == {
        "scale": "out_of_range",
        "closeness": "not_whole_number",
        "pick": "not_an_option",
        "note": "too_long",
        "extra": "unknown_item",
    }


@pytest.mark.parametrize(("answers", "problems"), [
    ({"closeness": 2, "pick": "a"}, {"scale": "required"}),
    ({"scale": "  ", "closeness": 2, "pick": "a"}, {"scale": "required"}),
    ({"scale": 3.5, "closeness": 2, "pick": "a"}, {"scale": "not_whole_number"}),
    ({"scale": "3", "closeness": 2, "pick": "a"}, {"scale": "not_whole_number"}),
    ({"scale": 3, "closeness": 2, "pick": "a", "note": 5}, {"note": "not_text"}),
])
def test_missing_and_mistyped_answers(answers, problems):
    with pytest.raises(BadInput) as refused:
        validate_answers(ITEMS, answers, MAX_TEXT)
    assert refused.value.details["items"] == problems


def test_an_items_own_max_length_overrides_the_default():
    items = [item("short_note", "text", max=5)]
    assert validate_answers(items, {"short_note": "12345"}, MAX_TEXT) == {"short_note": "12345"}
    with pytest.raises(BadInput):
        validate_answers(items, {"short_note": "123456"}, MAX_TEXT)


def test_stored_answers_carry_the_participant_task_and_instrument(db_session, study, clock):
    user = register(db_session, username="bob_01", password="correct-horse-1", consent=True, language="zh",
                    study=study, clock=clock, seed=3)
    ts = TaskService(db_session, study, time_scale=1.0, clock=clock).start(user, study.tasks[0].id)
    items = items_for_task(study, study.tasks[0], "zh")
    cleaned = validate_answers(items, {i["id"]: answer_for(i) for i in items}, MAX_TEXT)

    assert store_answers(db_session, ts, items, cleaned, clock) == len(cleaned)
    db_session.commit()

    rows = db_session.scalars(select(QuestionnaireResponse).order_by(QuestionnaireResponse.id)).all()
    instruments = {i["id"]: i["instrument"] for i in items}
    assert [(r.item_id, r.value) for r in rows] == list(cleaned.items())
    assert all((r.user_id, r.task_session_id, r.task_id) == (user.id, ts.id, ts.task_id) for r in rows)
    assert all(r.instrument == instruments[r.item_id] and r.submitted_at == clock.now() for r in rows)
