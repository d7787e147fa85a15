"""Issue 28 item 4: text that reaches the box without key presses (an input method's compositions, dictation,
autocomplete) is recorded with its input kind and the input/composition events, and is never flagged as
scripted merely for having no key presses."""
from __future__ import annotations

import csv
import io
import zipfile

import pytest

from services.participants.quality import COMPOSED, TOO_FAST, TOO_FEW_KEYSTROKES, typing_flags
from services.reporting.export_service import ExportOptions, export_runtime

# 39 characters, the length of the message the outside probe saw flagged
COMPOSED_TEXT = "今天下午我和两个朋友去图书馆复习功课，然后一起去学校食堂吃了晚饭，聊得很开心。"
DICTATED_TEXT = "我刚才用语音输入说了这句话，手机把它变成了文字发过来，没有按任何键。"
OLD_PAGE_TEXT = "这句话来自旧版页面，只统计按键，所以输入法打的字记为零次按键，也不该被标记。"


def _rows(archive: zipfile.ZipFile, name: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(archive.read(name).decode("utf-8"))))


def _send(api, content: str, signals: dict) -> None:
    response = api.post("/api/tasks/T1/messages", json={"content": content, **signals})
    assert response.status_code == 201, response.get_json()


@pytest.mark.postgres  # the monitor counts characters with SQL length()
def test_text_without_key_presses_is_recorded_by_kind_and_not_flagged(app, make_participant, admin_client, clock,
                                                                      study):
    assert len(COMPOSED_TEXT) == 39 and len(DICTATED_TEXT) >= study.typing_checks.min_chars
    writer = make_participant("ime_writer")
    assert writer.post("/api/tasks/T1/start").status_code == 201
    clock.advance(60)
    _send(writer, COMPOSED_TEXT, {"typing_ms": 14_000, "keystrokes": 0, "pasted_chars": 0, "focus_losses": 0,
                                  "input_events": 21, "composition_events": 7, "input_kind": "composed"})
    _send(writer, DICTATED_TEXT, {"typing_ms": 0, "keystrokes": 0, "pasted_chars": 0, "focus_losses": 0,
                                  "input_events": 1, "composition_events": 0, "input_kind": "dictated"})
    # an older page (no kind, keydown only): no key presses is no sign of a script
    _send(writer, OLD_PAGE_TEXT, {"typing_ms": 0, "keystrokes": 0, "pasted_chars": 0, "focus_losses": 0})
    user_id = writer.get("/api/auth/me").get_json()["user"]["id"]

    record = admin_client.get(f"/api/admin/participants/{user_id}").get_json()
    sent = {m["content"]: m for m in record["messages"] if m["role"] == "user"}
    assert (sent[COMPOSED_TEXT]["input_kind"], sent[COMPOSED_TEXT]["input_events"],
            sent[COMPOSED_TEXT]["composition_events"]) == ("composed", 21, 7)
    assert sent[COMPOSED_TEXT]["implausible_typing"] == []  # judged, and plausible
    assert sent[DICTATED_TEXT]["implausible_typing"] is None  # not judged
    assert sent[OLD_PAGE_TEXT]["implausible_typing"] is None
    monitor = {r["id"]: r for r in admin_client.get("/api/admin/participants").get_json()["participants"]}
    assert monitor[user_id]["implausible_typing_messages"] == 0

    archive = zipfile.ZipFile(io.BytesIO(export_runtime(app.extensions["memory_lab"], options=ExportOptions()).data))
    rows = {r["text"]: r for r in _rows(archive, "messages.csv") if r["role"] == "user"}
    assert {k: rows[COMPOSED_TEXT][k] for k in ("input_kind", "input_events", "composition_events",
                                                "implausible_typing")} == {
        "input_kind": "composed", "input_events": "21", "composition_events": "7", "implausible_typing": "0"}
    assert (rows[DICTATED_TEXT]["input_kind"], rows[DICTATED_TEXT]["implausible_typing"]) == ("dictated", "")
    assert (rows[OLD_PAGE_TEXT]["input_kind"], rows[OLD_PAGE_TEXT]["implausible_typing"]) == ("", "")
    codebook = {(r["file"], r["column"]): r["description"] for r in _rows(archive, "codebook.csv")}
    for kind in ("typed", "composed", "pasted", "dictated", "unknown"):
        assert kind in codebook[("messages.csv", "input_kind")]
    assert ("messages.csv", "composition_events") in codebook and ("messages.csv", "input_events") in codebook
    assert "never flagged merely for coming without key presses" in codebook[("messages.csv", "implausible_typing")]


def test_an_unknown_input_kind_is_refused_and_nothing_is_stored(make_participant, clock):
    writer = make_participant("odd_kind")
    assert writer.post("/api/tasks/T1/start").status_code == 201
    response = writer.post("/api/tasks/T1/messages", json={"content": "你好", "input_kind": "telepathy",
                                                            "composition_events": -1})
    assert response.status_code == 400
    assert set(response.get_json()["details"]["fields"]) == {"input_kind", "composition_events"}
    assert writer.get("/api/tasks/T1").get_json()["task"]["messages"] == []


def test_composed_text_is_judged_by_speed_only_and_typed_text_by_both(study):
    checks = study.typing_checks
    chars = 40
    instant = 100  # 40 characters in 0.1 s: faster than anyone composes or types
    assert typing_flags(chars, instant, 0, 0, checks, COMPOSED) == [TOO_FAST]
    assert typing_flags(chars, 20_000, 0, 0, checks, COMPOSED) == []
    assert typing_flags(chars, instant, 1, 0, checks, "typed") == [TOO_FAST, TOO_FEW_KEYSTROKES]
    assert typing_flags(chars, instant, 0, 0, checks, "typed") is None  # "typed" with no key: nothing to judge
    assert typing_flags(chars, instant, 0, 0, checks, "unknown") is None
