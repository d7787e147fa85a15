"""A pasted message and a failed attention check show up in the admin record, the monitor's filters,
and the export (messages.csv, questionnaires_long.csv, participants.csv) with their codebook entries."""
from __future__ import annotations

import csv
import io
import zipfile

import pytest

from services.reporting.export_service import ExportOptions, export_runtime
from services.study.definition import build_study

PASTED = "这是一段从别处复制过来的很长的回答，内容工整得不像随手打的字。"
TYPED = "我今天自己打字聊天。"


@pytest.fixture
def settings(settings):
    definition = settings.study.as_dict()
    definition["tasks"][0]["questionnaire"] += ["attention_check"]
    settings.study = build_study(definition)
    return settings


def _do_t1(api, clock, study, *, content: str, signals: dict, attention: int) -> None:
    assert api.post("/api/tasks/T1/start").status_code == 201
    clock.advance(60)
    assert api.post("/api/tasks/T1/messages", json={"content": content, **signals}).status_code == 201
    while api.post("/api/tasks/T1/finish").status_code != 200:
        clock.advance(study.timing.idle_gap_seconds - 1)
    items = api.get("/api/tasks/T1/questionnaire").get_json()["items"]
    check = next(i for i in items if i["type"] == "attention")
    assert "expected" not in check and (check["min"], check["max"]) == (1, 7)  # the answer stays on the server
    answers = {i["id"]: i["min"] if i["type"] in ("likert", "ios") else i["options"][0]["value"]
               for i in items if i["type"] != "attention"}
    answers[check["id"]] = attention
    response = api.post("/api/tasks/T1/questionnaire", json={"answers": answers})
    assert response.status_code == 201, response.get_json()


def _rows(archive: zipfile.ZipFile, name: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(archive.read(name).decode("utf-8"))))


def test_pasted_message_and_failed_check_reach_the_record_the_monitor_and_the_export(
        app, make_participant, admin_client, clock, study):
    copier = make_participant("copier")
    careful = make_participant("careful")
    _do_t1(copier, clock, study, content=PASTED,
           signals={"typing_ms": 900, "keystrokes": 2, "pasted_chars": len(PASTED), "focus_losses": 3}, attention=5)
    _do_t1(careful, clock, study, content=TYPED,
           signals={"typing_ms": 7400, "keystrokes": 23, "pasted_chars": 0, "focus_losses": 0}, attention=2)
    copier_id = copier.get("/api/auth/me").get_json()["user"]["id"]
    careful_id = careful.get("/api/auth/me").get_json()["user"]["id"]

    record = admin_client.get(f"/api/admin/participants/{copier_id}").get_json()
    sent = next(m for m in record["messages"] if m["role"] == "user")
    assert (sent["typing_ms"], sent["keystrokes"], sent["pasted_chars"], sent["focus_losses"]) == (
        900, 2, len(PASTED), 3)
    participant = record["participant"]
    assert (participant["pasted_messages"], participant["attention_checks"], participant["attention_failures"]) == (
        1, 1, 1)
    assert next(a for a in record["questionnaires"] if a["item_id"] == "attn_1")["value"] == 5

    def shown(query: str) -> set[int]:
        return {r["id"] for r in admin_client.get(f"/api/admin/participants?{query}").get_json()["participants"]}

    assert shown("pasted=1") == {copier_id}
    assert shown("failed_checks=1") == {copier_id}
    assert shown("failed_checks=0") == {careful_id}
    assert shown("pasted=0&failed_checks=0") == {careful_id}
    assert admin_client.get("/api/admin/participants?pasted=maybe").status_code == 400

    runtime = app.extensions["memory_lab"]
    archive = zipfile.ZipFile(io.BytesIO(export_runtime(runtime, options=ExportOptions()).data))
    messages = {r["text"]: r for r in _rows(archive, "messages.csv") if r["role"] == "user"}
    assert {k: messages[PASTED][k] for k in ("typing_ms", "keystrokes", "pasted_chars", "focus_losses")} == {
        "typing_ms": "900", "keystrokes": "2", "pasted_chars": str(len(PASTED)), "focus_losses": "3"}
    assert messages[TYPED]["pasted_chars"] == "0"
    assert all(r["pasted_chars"] == "" for r in _rows(archive, "messages.csv") if r["role"] == "assistant")
    checks = {r["participant_code"]: r for r in _rows(archive, "questionnaires_long.csv") if r["item_id"] == "attn_1"}
    people = {r["username"]: r for r in _rows(archive, "participants.csv")}
    copier_code, careful_code = people["copier"]["participant_code"], people["careful"]["participant_code"]
    assert (checks[copier_code]["item_type"], checks[copier_code]["attention_passed"]) == ("attention", "0")
    assert checks[careful_code]["attention_passed"] == "1"
    assert (people["copier"]["pasted_messages"], people["copier"]["attention_failures"],
            people["copier"]["focus_losses"]) == ("1", "1", "3")
    assert (people["careful"]["pasted_messages"], people["careful"]["attention_failures"]) == ("0", "0")
    codebook = {(r["file"], r["column"]) for r in _rows(archive, "codebook.csv")}
    for column in ("typing_ms", "keystrokes", "pasted_chars", "focus_losses"):
        assert ("messages.csv", column) in codebook
    for column in ("attention_checks", "attention_failures", "pasted_messages"):
        assert ("participants.csv", column) in codebook
    assert ("questionnaires_long.csv", "attention_passed") in codebook
    assert "instructed answer 2" in archive.read("codebook.md").decode("utf-8")


def test_an_attention_item_needs_an_expected_answer_in_range():
    from services.study.definition import StudyDefinitionError, load_study

    definition = load_study().as_dict()
    definition["instruments"]["attention_check"]["items"][0]["expected"] = 9
    with pytest.raises(StudyDefinitionError, match="expected must be one of"):
        build_study(definition)


SCRIPTED = "我每天早上六点起床，然后去公园跑步半个小时，回来以后再吃早饭。"  # 31 characters


@pytest.mark.postgres  # the monitor counts characters with SQL length()
def test_scripted_typing_is_flagged_in_the_monitor_and_the_export(app, make_participant, admin_client, clock, study):
    """One keystroke and 0 ms of typing for 31 characters, nothing pasted: a script, not a person."""
    assert len(SCRIPTED) >= study.typing_checks.min_chars
    bot = make_participant("scripted")
    person = make_participant("typist")
    _do_t1(bot, clock, study, content=SCRIPTED,
           signals={"typing_ms": 0, "keystrokes": 1, "pasted_chars": 0, "focus_losses": 0}, attention=2)
    _do_t1(person, clock, study, content=SCRIPTED,
           signals={"typing_ms": 21_000, "keystrokes": 95, "pasted_chars": 0, "focus_losses": 0}, attention=2)
    bot_id = bot.get("/api/auth/me").get_json()["user"]["id"]
    person_id = person.get("/api/auth/me").get_json()["user"]["id"]

    monitor = {r["id"]: r for r in admin_client.get("/api/admin/participants").get_json()["participants"]}
    assert monitor[bot_id]["implausible_typing_messages"] == 1
    assert monitor[person_id]["implausible_typing_messages"] == 0
    flagged = admin_client.get("/api/admin/participants?implausible_typing=1").get_json()["participants"]
    assert [r["id"] for r in flagged] == [bot_id]
    record = admin_client.get(f"/api/admin/participants/{bot_id}").get_json()
    sent = next(m for m in record["messages"] if m["role"] == "user")
    assert sent["implausible_typing"] == ["too_fast", "too_few_keystrokes"]

    runtime = app.extensions["memory_lab"]
    archive = zipfile.ZipFile(io.BytesIO(export_runtime(runtime, options=ExportOptions()).data))
    codes = {r["participant_code"]: r for r in _rows(archive, "participants.csv")}
    by_user = {row["participant_code"]: row for row in _rows(archive, "messages.csv") if row["role"] == "user"}
    bot_code = monitor[bot_id]["participant_code"]
    person_code = monitor[person_id]["participant_code"]
    assert codes[bot_code]["implausible_typing_messages"] == "1"
    assert codes[person_code]["implausible_typing_messages"] == "0"
    assert by_user[bot_code]["implausible_typing"] == "1"
    assert by_user[bot_code]["implausible_typing_reasons"] == "too_fast;too_few_keystrokes"
    assert by_user[bot_code]["typed_chars_per_second"] == ""  # 0 ms of typing: no rate, flagged all the same
    assert (by_user[person_code]["implausible_typing"], by_user[person_code]["typed_chars_per_second"]) == (
        "0", "1.47619")  # 31 characters in 21 s
    codebook = {(r["file"], r["column"]): r for r in _rows(archive, "codebook.csv")}
    rule = codebook[("messages.csv", "implausible_typing")]["description"]
    checks = study.typing_checks
    assert f"{checks.max_chars_per_second:g} typed characters per second" in rule
    assert f"{checks.min_keystrokes_per_char:g} key presses per typed character" in rule


def test_typing_thresholds_are_validated_in_the_study_file(study):
    from services.study.definition import StudyDefinitionError

    with pytest.raises(StudyDefinitionError, match="typing_checks"):
        study.with_overrides({"typing_checks": {"max_chars_per_second": 0}})
    with pytest.raises(StudyDefinitionError, match="typing_checks.min_chars"):
        study.with_overrides({"typing_checks": {"min_chars": "many"}})
