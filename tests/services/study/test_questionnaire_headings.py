"""Participants see neutral questionnaire headings; researchers keep the construct (issue 18 item 14)."""
from __future__ import annotations

import pytest

from services.reporting.codebook import codebook_markdown
from services.study.definition import StudyDefinitionError, build_study
from services.study.questionnaire_service import items_for_task

CONSTRUCT_WORDS = ("操纵", "信任", "临场", "检验", "manipulation", "trust", "presence", "check")


@pytest.mark.parametrize("language", ["zh", "en"])
def test_no_heading_a_participant_sees_names_a_construct(study, language):
    titles = {text for instrument in study.instruments.values() for text in instrument.title.values()}
    for task in study.tasks:
        for item in items_for_task(study, task, language):
            heading = item["instrument_title"]
            assert heading not in titles, (task.id, item["id"], heading)
            assert not any(word in heading.lower() for word in CONSTRUCT_WORDS), (task.id, item["id"], heading)


def test_the_default_study_shows_about_this_conversation(study):
    t2 = items_for_task(study, study.task("T2"), "zh")
    check = next(item for item in t2 if item["instrument"] == "manipulation_check")
    assert check["instrument_title"] == "关于这次对话"
    assert next(item for item in items_for_task(study, study.task("T2"), "en")
                if item["id"] == check["id"])["instrument_title"] == "About this conversation"


def test_an_instrument_without_a_heading_shows_none_rather_than_its_construct(study):
    definition = study.as_dict()
    del definition["instruments"]["manipulation_check"]["heading"]
    changed = build_study(definition)
    items = items_for_task(changed, changed.task("T2"), "zh")
    assert next(i for i in items if i["instrument"] == "manipulation_check")["instrument_title"] == ""


def test_the_codebook_keeps_the_construct_and_names_the_heading_shown(study):
    text = codebook_markdown([], study, generated_at="2026-03-02T09:00:00Z", exclude_pii=False, bom=False)
    assert "### manipulation_check: Manipulation check / 操纵检验" in text
    assert "Participants saw the heading: About this conversation / 关于这次对话" in text


def test_a_heading_must_be_given_in_every_language(study):
    with pytest.raises(StudyDefinitionError, match="instruments.ios.heading"):
        study.with_overrides({"instruments": {"ios": {"heading": {"zh": "你和助手", "fr": "Toi"}}}})
