"""Issue 28 item 3: engagement that means chatting. Only messages with real content count towards the
minimum (the study file's ``timing.min_message_words`` / ``min_message_cjk_chars``, zero-width characters
not counted), near-duplicates of the participant's earlier messages in the task do not count, the rest are
flagged in the quality signals, and ``pasted_chars`` larger than the message is clamped and flagged."""
from __future__ import annotations

import pytest
from sqlalchemy import select

from database.models import Message
from services.participants.quality import content_flags
from services.study.definition import StudyDefinitionError, load_study
from tests.conftest import ApiClient, walk_task

PID = "5f8a1c2e9b3d4a0012345678"


@pytest.fixture
def settings(settings):
    settings.study = settings.study.with_overrides({
        "panel": {"id_parameter": "PROLIFIC_PID", "tasks": {
            t: {"completion_code": f"C{t[1]}DONE", "incomplete_code": f"C{t[1]}NOPE"}
            for t in ("T1", "T2", "T3", "T4")}},
        "payments": {"currency": "GBP", "per_task": {"T1": 1.5, "T2": 2.0, "T3": 2.0, "T4": 2.5},
                     "completion_bonus": 3.0}})
    return settings


def _panel(app, external_id: str) -> ApiClient:
    api = ApiClient(app.test_client())
    assert api.post("/api/auth/panel", json={"external_id": external_id, "consent": True}).status_code == 201
    return api


def test_what_counts_as_real_content():
    timing = load_study().timing
    assert (timing.min_message_words, timing.min_message_cjk_chars) == (2, 4)

    def flags(text, earlier=()):
        return content_flags(text, list(earlier), timing)

    assert flags("a") == ["too_little_content"]
    assert flags("\u200b\u200b\u200b") == ["too_little_content"]
    assert flags("\u200bok\u200b \u200b") == ["too_little_content"]
    assert flags("你好吗") == ["too_little_content"]  # three CJK characters
    assert flags("下次再聊") == [] and flags("ok thanks") == [] and flags("我 like it") == []
    assert flags("I like hiking in the hills.", ["I like hiking in the hills!"]) == ["near_duplicate"]
    assert flags("I like hiking in the hills.", ["I LIKE\u200b hiking in the hills"]) == ["near_duplicate"]
    assert flags("I like hiking in the hills.", ["My cat is called Tuanzi."]) == []
    with pytest.raises(StudyDefinitionError, match="min_message_words"):
        load_study(overrides={"timing": {"min_message_words": -1}})


# The three kinds differ in how the text is judged, not in what is stored: the PostgreSQL pass runs one.
@pytest.mark.parametrize("messages", [
    ["a", "a", "a"],
    pytest.param(["I really like hiking in the hills."] * 3, marks=pytest.mark.postgres),
    ["\u200b", "\u200b\u200b", "\u200b\u200b\u200b"],
], ids=["single_letters", "identical_sentences", "zero_width"])
def test_empty_or_repeated_messages_earn_no_code_and_no_pay_and_are_flagged(app, admin_client, clock, messages):
    study = app.extensions["memory_lab"].study
    api = _panel(app, PID)
    done = walk_task(api, clock, "T1", messages, study=study)
    assert done["completion"]["incomplete"] is True and done["completion"]["completion_code"] == "C1NOPE"
    upload = admin_client.get("/api/admin/payments.csv?upload=1").get_data(as_text=True)
    assert upload == ""
    row = admin_client.get("/api/admin/participants").get_json()["participants"][0]
    assert row["low_content_messages"] >= 2


@pytest.mark.postgres
def test_three_real_messages_still_complete(app, clock):
    study = app.extensions["memory_lab"].study
    api = _panel(app, PID)
    done = walk_task(api, clock, "T1", ["你好，我叫小林。", "我喜欢在周末爬山。", "下次再聊吧。"], study=study)
    assert done["completion"] == {"completion_code": "C1DONE", "redirect_url": None, "incomplete": False}


@pytest.mark.postgres
def test_pasted_chars_larger_than_the_message_are_clamped_and_flagged(app, admin_client, clock):
    api = _panel(app, PID)
    assert api.post("/api/tasks/T1/start").status_code == 201
    text = "This message is sixty-seven characters long, give or take a letter."
    sent = api.post("/api/tasks/T1/messages", json={"content": text, "pasted_chars": 1_000_000})
    assert sent.status_code == 201
    with app.extensions["memory_lab"].db.Session() as session:
        stored = session.scalar(select(Message).where(Message.role == "user"))
        assert stored.pasted_chars == len(text) and stored.content_flags == ["pasted_chars_clamped"]
    row = admin_client.get("/api/admin/participants").get_json()["participants"][0]
    assert row["pasted_chars"] == len(text) and row["pasted_chars_clamped"] == 1
