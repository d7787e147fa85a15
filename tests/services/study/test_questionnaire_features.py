"""Questionnaire order randomisation and display conditions (issue 29 §1): in the definition (validated), the
questionnaire API, the export and the codebook."""
from __future__ import annotations

import io
import random
import zipfile

import pytest

from services.reporting import codebook
from services.study.definition import StudyDefinitionError, find_problems, load_study, shown
from services.study.questionnaire_service import draw_order, items_for_task, validate_answers

FOLLOW_UP = {"id": "pu_why", "type": "text", "text": {"zh": "为什么？", "en": "Why?"}, "required": True,
             "show_if": {"item": "pu_1", "op": ">=", "value": 5}}


def _with_follow_up(study):
    items = [dict(i) for i in study.as_dict()["instruments"]["perceived_understanding"]["items"]] + [FOLLOW_UP]
    return study.with_overrides({"instruments": {"perceived_understanding": {"items": items}}})


def test_display_conditions_are_validated(study):
    with_condition = _with_follow_up(study)
    assert with_condition.instruments["perceived_understanding"].items[-1]["show_if"]["op"] == ">="
    definition = with_condition.as_dict()
    definition["instruments"]["perceived_understanding"]["items"][-1]["show_if"] = {"item": "nope", "op": ">=",
                                                                                    "value": 5}
    problems = find_problems(definition)
    assert problems and "nope" in problems[0].message
    assert problems[0].key == "instruments.perceived_understanding.items[3].show_if.item"
    definition["instruments"]["perceived_understanding"]["items"][-1]["show_if"] = {"item": "pu_1", "op": "~",
                                                                                    "value": 5}
    assert find_problems(definition)[0].key == "instruments.perceived_understanding.items[3].show_if.op"
    definition["instruments"]["perceived_understanding"]["items"][-1]["show_if"] = {"item": "pu_1", "op": ">=",
                                                                                    "value": 5, "extra": 1}
    assert find_problems(definition)[0].code == "unknown_key"
    with pytest.raises(StudyDefinitionError, match="randomise_items"):
        with_condition.with_overrides({"instruments": {"perceived_understanding": {"randomise_items": True}}})


def test_a_conditional_item_is_asked_only_when_its_condition_holds(study):
    with_condition = _with_follow_up(study)
    items = items_for_task(with_condition, with_condition.task("T1"), "en")
    follow_up = next(i for i in items if i["id"] == "pu_why")
    assert follow_up["show_if"] == FOLLOW_UP["show_if"]
    base = {i["id"]: (i["min"] if i["type"] in ("likert", "ios") or (i["type"] == "attention" and not i["options"])
                      else i["options"][0]["value"] if i["options"] else "fine")
            for i in items if i["id"] != "pu_why"}
    low = validate_answers(items, {**base, "pu_1": 2}, 2000)  # not shown: not required
    assert "pu_why" not in low
    with pytest.raises(Exception) as refused:
        validate_answers(items, {**base, "pu_1": 2, "pu_why": "because"}, 2000)
    assert refused.value.details["items"] == {"pu_why": "not_shown"}
    with pytest.raises(Exception) as missing:
        validate_answers(items, {**base, "pu_1": 6}, 2000)
    assert missing.value.details["items"] == {"pu_why": "required"}
    assert validate_answers(items, {**base, "pu_1": 6, "pu_why": "it listened"}, 2000)["pu_why"] == "it listened"
    assert shown(FOLLOW_UP, {"pu_1": 5}) and not shown(FOLLOW_UP, {"pu_1": 4}) and not shown(FOLLOW_UP, {})


def test_orders_are_drawn_where_asked_and_kept(study):
    assert draw_order(study, study.task("T1")) is None
    shuffled = study.with_overrides({
        "tasks": [{**t, "randomise_instruments": t["id"] == "T1"} for t in study.as_dict()["tasks"]],
        "instruments": {"perceived_understanding": {"randomise_items": True}}})
    task = shuffled.task("T1")
    orders = [draw_order(shuffled, task, random.Random(seed)) for seed in range(8)]
    assert len({str(o) for o in orders}) > 1
    for order in orders:
        assert sorted(name for name, _ in order) == sorted(task.questionnaire)
        ids = dict((name, ids) for name, ids in order)["perceived_understanding"]
        assert sorted(ids) == ["pu_1", "pu_2", "pu_3"]
    items = items_for_task(shuffled, task, "en", order=orders[0])
    assert [i["instrument"] for i in items][0] == orders[0][0][0]
    assert [i["id"] for i in items if i["instrument"] == "perceived_understanding"] == dict(
        (n, i) for n, i in orders[0])["perceived_understanding"]
    # an order recorded under another definition that no longer fits is not used
    assert [i["id"] for i in items_for_task(shuffled, task, "en", order=[["nope", ["x"]]])] == [
        i["id"] for i in items_for_task(shuffled, task, "en")]


@pytest.mark.postgres  # the drawn order is stored with the task session (JSON) and exported
def test_the_order_is_recorded_per_participant_and_exported(app, settings, make_participant, admin_client, clock):
    from tests.conftest import answer_for

    runtime = app.extensions["memory_lab"]
    shuffled = runtime.settings.study.with_overrides({
        "tasks": [{**t, "randomise_instruments": True} for t in runtime.settings.study.as_dict()["tasks"]]})
    definition = shuffled.as_dict()
    draft = admin_client.post("/api/admin/study/drafts", json={"definition": definition}).get_json()
    assert admin_client.post(f"/api/admin/study/drafts/{draft['draft_id']}/publish", json={}).status_code == 200
    runtime.studies.refresh(force=True)
    person = make_participant()
    assert person.post("/api/tasks/T1/start").status_code == 201
    clock.advance(20)
    person.post("/api/tasks/T1/messages", json={"content": "你好"})
    while person.post("/api/tasks/T1/finish").status_code != 200:
        clock.advance(shuffled.timing.idle_gap_seconds - 1)
    first = person.get("/api/tasks/T1/questionnaire").get_json()["items"]
    again = person.get("/api/tasks/T1/questionnaire").get_json()["items"]
    assert [i["id"] for i in first] == [i["id"] for i in again]
    assert person.post("/api/tasks/T1/questionnaire",
                       json={"answers": {i["id"]: answer_for(i) for i in first}}).status_code == 201
    export = admin_client.get("/api/admin/export")
    with zipfile.ZipFile(io.BytesIO(export.data)) as archive:
        sessions = archive.read("task_sessions.csv").decode()
        book = archive.read("codebook.csv").decode()
    assert "questionnaire_order" in sessions.splitlines()[0]
    instruments_in_order = []
    for item in first:
        if item["instrument"] not in instruments_in_order:
            instruments_in_order.append(item["instrument"])
    assert instruments_in_order[0] in sessions.splitlines()[1]
    assert "questionnaire_order" in book


def test_codebook_names_the_display_condition(study):
    item = _with_follow_up(study).instruments["perceived_understanding"].items[-1]
    assert "shown only when pu_1 >= 5" in codebook.item_scale(dict(item))
    assert load_study().task("T1").randomise_instruments is False


def test_scale_labels_are_validated_shown_and_in_the_codebook(study):
    labels = {"1": {"zh": "一点也不", "en": "Not at all"}, "7": {"zh": "完全是", "en": "Completely"}}
    items = [dict(i) for i in study.as_dict()["instruments"]["perceived_understanding"]["items"]]
    items[0] = {**items[0], "labels": labels}
    labelled = study.with_overrides({"instruments": {"perceived_understanding": {"items": items}}})
    shown_items = items_for_task(labelled, labelled.task("T1"), "en")
    assert next(i for i in shown_items if i["id"] == "pu_1")["labels"] == {"1": "Not at all", "7": "Completely"}
    assert next(i for i in shown_items if i["id"] == "pu_2")["labels"] is None
    assert "1 = Not at all / 一点也不" in codebook.item_scale(dict(labelled.instruments["perceived_understanding"]
                                                                    .items[0]))
    items[0] = {**items[0], "labels": {"9": {"zh": "x", "en": "x"}}}
    definition = study.as_dict()
    definition["instruments"]["perceived_understanding"]["items"] = items
    problem = find_problems(definition)[0]
    assert problem.key == "instruments.perceived_understanding.items[0].labels.9"
