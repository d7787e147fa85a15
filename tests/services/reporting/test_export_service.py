"""The data export: every file, row counts equal to the database, a complete codebook, agreeing
long and wide questionnaires, Chinese text intact through pandas, and personal data really removed."""
from __future__ import annotations

import csv
import io
import json
import os
import re
import shutil
import zipfile
from datetime import datetime, timedelta

import pandas as pd
import pytest
from sqlalchemy import func, select

from config import Settings
from database.db_manager import Database
from database.models import (
    ConsolidationRun,
    Message,
    ProfileVersion,
    QuestionnaireResponse,
    RecallEvent,
    TaskSession,
    User,
)
from services.platform.clock import ManualClock
from services.reporting.export_service import CSV_FILES, ExportOptions, export_runtime, scrub_secrets
from tests.conftest import ApiClient, _reset_schema

TASK_OFFSETS = {"T1": 0, "T2": 2, "T3": 9, "T4": 16}
# Quotes, commas and a line break inside a message: the CSV must quote them, not split rows.
SCRIPTS = {
    "zh": ["我叫林晓雨，我对海鲜过敏，\"真的\"很严重。\n第二行也是我说的。", "我养了一只猫，叫麻薯。"],
    "en": ["My name is Alex, and I'm allergic to seafood.", "I have a cat called Mochi."],
}
OPEN_ANSWER = "这三周很有意思，谢谢你记得我的猫！"
EXPECTED_FILES = set(CSV_FILES) | {"reply_contexts.jsonl", "codebook.csv", "codebook.md", "study_config.json",
                                   "manifest.json"}


def _answers(items: list[dict], seed: int) -> dict:
    answers = {}
    for n, item in enumerate(items):
        if item["type"] in ("likert", "ios"):
            answers[item["id"]] = item["min"] + (seed * 3 + n) % (item["max"] - item["min"] + 1)
        elif item["type"] == "choice":
            answers[item["id"]] = item["options"][seed % len(item["options"])]["value"]
        elif item["type"] == "text":
            answers[item["id"]] = f"{OPEN_ANSWER}（{seed}）"
    return answers


def _walk(api: ApiClient, clock: ManualClock, task_id: str, language: str, seed: int, study: dict) -> None:
    assert api.post(f"/api/tasks/{task_id}/start").status_code == 201
    for text in SCRIPTS[language]:
        clock.advance(60)
        response = api.post(f"/api/tasks/{task_id}/messages", json={"content": f"{task_id} {text}"})
        assert response.status_code == 201, response.get_json()
    while api.post(f"/api/tasks/{task_id}/finish").status_code != 200:
        clock.advance(study.timing.idle_gap_seconds - 1)
    items = api.get(f"/api/tasks/{task_id}/questionnaire").get_json()["items"]
    response = api.post(f"/api/tasks/{task_id}/questionnaire", json={"answers": _answers(items, seed)})
    assert response.status_code == 201, response.get_json()


@pytest.fixture(scope="module")
def exported(tmp_path_factory, migrated_sqlite_template):
    """Four participants (one per group) walk the study; the third stops after T2 and is withdrawn."""
    from app import create_app

    url = os.environ.get("TEST_DATABASE_URL")
    if url:
        db = Database(url)
        _reset_schema(db)
        db.upgrade()
        db.dispose()
    else:
        path = tmp_path_factory.mktemp("export") / "export.db"
        shutil.copyfile(migrated_sqlite_template, path)
        url = f"sqlite:///{path}"
    settings = Settings.from_env(database_url=url, secret_key="export-test", testing=True, scheduler_enabled=False,
                                 consolidate_inline=True, assignment_seed=1234, llm_providers=["offline"],
                                 embedding_provider="offline", rate_limits_enabled=False)
    clock = ManualClock(datetime(2026, 3, 2, 9, 0, 0))
    app = create_app(settings, clock=clock)
    study = settings.study
    people = []
    for n, language in enumerate(["zh", "zh", "en", "zh"]):
        api = ApiClient(app.test_client())
        assert api.register(f"export{n}", language=language).status_code == 201
        people.append((api, language))
    t1_done = None
    for task_id, offset in TASK_OFFSETS.items():
        if t1_done is not None:  # a minute past the offset after the last T1, every task is open
            clock.set(max(clock.now(), t1_done + timedelta(days=offset, minutes=1)))
        for n, (api, language) in enumerate(people):
            if n == 2 and task_id in ("T3", "T4"):
                continue
            _walk(api, clock, task_id, language, n, study)
        t1_done = t1_done or clock.now()
    runtime = app.extensions["memory_lab"]
    with runtime.db.session() as session:
        user = session.scalar(select(User).where(User.username == "export2"))
        user.status, user.withdrawn_at, user.withdrawn_reason = "withdrawn", clock.now(), "不想继续了"
    results = {}
    for bom in (False, True):
        for exclude in (False, True):
            result = export_runtime(runtime, options=ExportOptions(bom=bom, exclude_pii=exclude))
            results[(bom, exclude)] = zipfile.ZipFile(io.BytesIO(result.data))
    yield {"app": app, "runtime": runtime, "study": study, "zips": results}
    runtime.background.shutdown()
    runtime.db.dispose()


def _read(archive: zipfile.ZipFile, name: str, *, bom: bool = False) -> list[dict[str, str]]:
    text = archive.read(name).decode("utf-8-sig" if bom else "utf-8")
    return list(csv.DictReader(io.StringIO(text, newline="")))


def _count(runtime, model, *where) -> int:
    with runtime.db.Session() as session:
        return session.scalar(select(func.count()).select_from(model).where(*where))


def test_every_file_is_present(exported):
    for (_, exclude), archive in exported["zips"].items():
        expected = EXPECTED_FILES - ({"reply_contexts.jsonl"} if exclude else set())
        assert set(archive.namelist()) == expected


def test_row_counts_match_the_database(exported):
    runtime = exported["runtime"]
    archive = exported["zips"][(False, False)]
    participants = _count(runtime, User, User.role == "participant")
    assert participants == 4
    expected = {
        "participants.csv": participants,
        "task_sessions.csv": _count(runtime, TaskSession),
        "messages.csv": _count(runtime, Message),
        "questionnaires_long.csv": _count(runtime, QuestionnaireResponse),
        "questionnaires_wide.csv": participants,
        "profiles.csv": _count(runtime, ProfileVersion),
        "recall_events.csv": _count(runtime, RecallEvent),
        "consolidation_runs.csv": _count(runtime, ConsolidationRun),
        "reply_contexts.jsonl": _count(runtime, Message, Message.role == "assistant"),
    }
    for name, rows in expected.items():
        if name.endswith(".jsonl"):
            assert len(archive.read(name).decode("utf-8").splitlines()) == rows
        else:
            assert len(_read(archive, name)) == rows, name
    # 3 participants x 4 tasks + 1 x 2, two messages and two replies each
    assert expected["messages.csv"] == 14 * 4
    assert expected["profiles.csv"] > 0, "L3/L4 participants must have profile versions"
    assert expected["recall_events.csv"] > 0, "the L4 participant's T2-T4 messages must produce recall events"
    manifest = json.loads(archive.read("manifest.json"))
    assert manifest["files"]["messages.csv"] == expected["messages.csv"]
    assert "sqlite" in manifest["deployment"]["database"] or "postgres" in manifest["deployment"]["database"]
    assert not any("://" in str(v) for v in manifest["deployment"].values())


def test_every_row_carries_the_code_and_group(exported):
    runtime = exported["runtime"]
    with runtime.db.Session() as session:
        groups = {u.participant_code: u.memory_group for u in session.scalars(select(User).where(
            User.role == "participant"))}
    archive = exported["zips"][(False, True)]
    for name in CSV_FILES:
        rows = _read(archive, name)
        for row in rows:
            assert groups[row["participant_code"]] == row["memory_group"], name


def test_the_codebook_describes_every_column_of_every_file(exported):
    for (bom, _), archive in exported["zips"].items():
        codebook = _read(archive, "codebook.csv", bom=bom)
        documented = {(r["file"], r["column"]) for r in codebook}
        assert all(r["description"].strip() and r["type"].strip() for r in codebook)
        for name in [*CSV_FILES, "codebook.csv"]:
            header = next(csv.reader(io.StringIO(archive.read(name).decode("utf-8-sig"))))
            missing = [c for c in header if (name, c) not in documented]
            assert not missing, (name, missing)
        markdown = archive.read("codebook.md").decode("utf-8")
        for name in CSV_FILES:
            assert f"## {name}" in markdown
    # every item: its scale and both wordings, as asked in the study
    archive = exported["zips"][(False, False)]
    codebook = _read(archive, "codebook.csv")
    items = {r["item_id"]: r for r in codebook if r["file"] == "questionnaires_long.csv" and r["item_id"]}
    study = exported["study"]
    for instrument in study.definition["instruments"].values():
        for item in instrument["items"]:
            row = items[item["id"]]
            assert row["wording_zh"] == item["text"]["zh"] and row["wording_en"] == item["text"]["en"]
            assert row["scale"]
    assert "1-7" in items["pu_1"]["scale"] and "7 = Strongly agree" in items["pu_1"]["scale"]
    assert "1 = 完全不同意" in items["pu_1"]["scale"]
    wide = {r["column"]: r for r in codebook if r["file"] == "questionnaires_wide.csv"}
    open_1 = study.definition["instruments"]["open_questions"]["items"][0]
    assert wide["T4_open_1"]["wording_zh"] == open_1["text"]["zh"]
    markdown = archive.read("codebook.md").decode("utf-8")
    assert study.definition["instruments"]["perceived_understanding"]["items"][0]["text"]["zh"] in markdown


def test_wide_and_long_questionnaires_agree(exported):
    for (bom, exclude), archive in exported["zips"].items():
        long = _read(archive, "questionnaires_long.csv", bom=bom)
        wide = {r["participant_code"]: r for r in _read(archive, "questionnaires_wide.csv", bom=bom)}
        for row in long:
            answer = row["value"] if row["item_type"] != "text" else row["text_answer"]
            assert wide[row["participant_code"]][f"{row['task_id']}_{row['item_id']}"] == answer
        item_columns = [c for c in next(iter(wide.values())) if c[:3] in ("T1_", "T2_", "T3_", "T4_")]
        filled = sum(1 for r in wide.values() for c in item_columns if r[c] != "")
        assert filled == len(long)
        assert ("T4_open_1" in item_columns) is not exclude


def test_questionnaire_values_equal_the_database(exported):
    runtime = exported["runtime"]
    archive = exported["zips"][(False, False)]
    with runtime.db.Session() as session:
        codes = {u.id: u.participant_code for u in session.scalars(select(User))}
        stored = {(codes[a.user_id], a.task_id, a.item_id): a.value
                  for a in session.scalars(select(QuestionnaireResponse))}
    exported_values = {(r["participant_code"], r["task_id"], r["item_id"]):
                       (r["text_answer"] if r["item_type"] == "text"
                        else r["value"] if r["item_type"] == "choice" else int(r["value"]))
                       for r in _read(archive, "questionnaires_long.csv")}
    assert exported_values == stored
    assert len(set(stored.values())) > 3, "answers must vary, or a column mix-up would go unnoticed"


@pytest.mark.parametrize("bom", [False, True])
def test_pandas_round_trip_keeps_chinese_text(exported, bom):
    runtime = exported["runtime"]
    archive = exported["zips"][(bom, False)]
    raw = archive.read("messages.csv")
    assert raw.startswith(b"\xef\xbb\xbf") is bom
    frame = pd.read_csv(io.BytesIO(raw), encoding="utf-8-sig" if bom else "utf-8", keep_default_na=False)
    assert frame.columns[0] == "message_id"
    with runtime.db.Session() as session:
        stored = {m.id: m.content for m in session.scalars(select(Message))}
    assert dict(zip(frame["message_id"], frame["text"], strict=True)) == stored
    multiline = [t for t in frame["text"] if "\n第二行也是我说的。" in t]
    assert multiline and all('"真的"' in t for t in multiline)
    wide = pd.read_csv(io.BytesIO(archive.read("questionnaires_wide.csv")), encoding="utf-8-sig")
    assert wide["T4_open_1"].dropna().str.startswith(OPEN_ANSWER).all()
    participants = pd.read_csv(io.BytesIO(archive.read("participants.csv")), encoding="utf-8-sig")
    assert "不想继续了" in set(participants["withdrawn_reason"].dropna())


def test_exclude_pii_removes_usernames_and_free_text(exported):
    runtime = exported["runtime"]
    with runtime.db.Session() as session:
        usernames = [u.username for u in session.scalars(select(User).where(User.role == "participant"))]
        texts = [m.content for m in session.scalars(select(Message))]
        open_answers = [a.value for a in session.scalars(select(QuestionnaireResponse))
                        if a.instrument == "open_questions"]
        profile_texts = [p.rendered for p in session.scalars(select(ProfileVersion)) if p.rendered]
    assert open_answers and profile_texts
    for bom in (False, True):
        archive = exported["zips"][(bom, True)]
        blob = "\n".join(archive.read(name).decode("utf-8-sig") for name in archive.namelist()
                         if name != "study_config.json")
        for secret in usernames + texts + open_answers + profile_texts + ["不想继续了"]:
            assert secret not in blob, secret[:30]
        assert "username" not in next(csv.reader(io.StringIO(archive.read("participants.csv").decode("utf-8-sig"))))
        messages = _read(archive, "messages.csv", bom=bom)
        assert "text" not in messages[0] and int(messages[0]["text_chars"]) > 0
        codebook = _read(archive, "codebook.csv", bom=bom)
        assert all(r["pii"] == "0" for r in codebook)
    with_pii = exported["zips"][(False, False)]
    assert usernames[0] in with_pii.read("participants.csv").decode("utf-8")


def test_replies_list_their_recalled_memory_ids(exported):
    archive = exported["zips"][(False, False)]
    contexts = [json.loads(line) for line in archive.read("reply_contexts.jsonl").decode("utf-8").splitlines()]
    by_id = {c["message_id"]: c for c in contexts}
    rows = _read(archive, "messages.csv")
    replies = [r for r in rows if r["role"] == "assistant"]
    assert replies and all(r["provider"] == "offline" for r in replies)
    for row in replies:
        context = by_id[int(row["message_id"])]["memory_context"]
        ids = [str(m["message_id"]) for m in context.get("recalled") or []]
        assert row["recalled_memory_ids"] == ";".join(ids)
        assert int(row["context_recent_turns"]) == len(context.get("recent_turns") or [])
    user_rows = [r for r in rows if r["role"] == "user"]
    assert all(r["recalled_memory_ids"] == "" and r["provider"] == "" for r in user_rows)


def test_study_config_is_the_study_in_use_without_secrets(exported):
    archive = exported["zips"][(False, False)]
    assert json.loads(archive.read("study_config.json")) == json.loads(json.dumps(exported["study"].as_dict()))
    dirty = {"name": "x", "providers": {"api_key": "sk-123", "model": "m", "SECRET_TOKEN": "s"},
             "list": [{"password": "p", "keep": 1}], "max_tokens": 600}
    assert scrub_secrets(dirty) == {"name": "x", "providers": {"model": "m"}, "list": [{"keep": 1}],
                                    "max_tokens": 600}


def test_task_sessions_carry_timing(exported):
    rows = _read(exported["zips"][(False, False)], "task_sessions.csv")
    done = [r for r in rows if r["status"] == "done"]
    assert len(done) == 14
    for row in done:
        assert float(row["active_seconds"]) >= exported["study"].timing.min_active_seconds
        assert row["started_at"] < row["completed_at"]
        assert float(row["chat_wall_seconds"]) > 0
        assert int(row["user_messages"]) == 2


PRECISE = re.compile(r"-?\d+(\.\d{1,6})?")


def test_numbers_are_written_at_the_stated_precision(exported):
    """Every number cell is fixed-point with at most 6 decimals (no 0.10800000000000001, no 1e-05),
    as the codebook states."""
    archive = exported["zips"][(False, False)]
    study = exported["study"]
    from services.reporting import codebook

    checked = 0
    for name in CSV_FILES:
        numeric = {c.name for c in codebook.columns_for(name, study) if c.type in (codebook.NUMBER, codebook.INTEGER)}
        for row in _read(archive, name):
            for column in numeric & set(row):
                if _is_number(row[column]):  # (questionnaires_long's value also holds choice answers)
                    assert PRECISE.fullmatch(row[column]), (name, column, row[column])
                    checked += 1
    assert checked > 100
    salience = [r["emotional_salience"] for r in _read(archive, "messages.csv") if r["emotional_salience"]]
    assert salience and any("." in s for s in salience)
    notes = archive.read("codebook.md").decode("utf-8")
    assert "at most 6 decimal places" in notes and "`0.10800000000000001` is written `0.108`" in notes


def _is_number(cell: str) -> bool:
    try:
        float(cell)
    except ValueError:
        return False
    return True


def test_number_text_rounds_floats_to_six_decimals():
    from services.text.cells import number_text

    assert number_text(0.1 + 0.008) == "0.108"
    assert number_text(1e-5) == "0.00001"
    assert number_text(1e-9) == "0"
    assert number_text(-1e-9) == "0"
    assert number_text(900.0) == "900"
    assert number_text(2 / 3) == "0.666667"


TIMING_COLUMNS = ["model_first_token_ms", "model_total_ms", "pacing_delay_ms", "visible_first_token_ms"]
EXPOSURE_COLUMNS = ["exposure_replies", "exposure_messages_mean", "exposure_profile_share", "exposure_tokens_mean"]


def test_replies_carry_their_timing(exported):
    archive = exported["zips"][(False, False)]
    replies = [r for r in _read(archive, "messages.csv") if r["role"] == "assistant"]
    assert replies
    for row in replies:
        assert all(row[c] != "" for c in TIMING_COLUMNS), row
        assert float(row["pacing_delay_ms"]) == 0.0 and row["pacing_mode"] == "off"  # the default study
        assert float(row["visible_first_token_ms"]) >= float(row["model_first_token_ms"])
    assert all(r[c] == "" for r in _read(archive, "messages.csv") if r["role"] == "user" for c in TIMING_COLUMNS)
    codebook = {(r["file"], r["column"]) for r in _read(archive, "codebook.csv")}
    assert {("messages.csv", c) for c in TIMING_COLUMNS} <= codebook
    assert {("task_sessions.csv", c) for c in EXPOSURE_COLUMNS} <= codebook


def test_task_sessions_aggregate_memory_exposure(exported):
    """Per participant x task: the replies with a recorded exposure and its means, equal to the stored
    per-reply exposures; none in T1; L1 exactly 0."""
    runtime = exported["runtime"]
    with runtime.db.Session() as session:
        stored = {}
        for m in session.scalars(select(Message).where(Message.role == "assistant")):
            stored.setdefault(m.task_session_id, []).append(m.memory_exposure)
    rows = _read(exported["zips"][(False, False)], "task_sessions.csv")
    groups = set()
    for row in rows:
        exposures = stored.get(int(row["task_session_id"]), [])
        if row["task_id"] == "T1":
            assert row["exposure_replies"] == "0" and row["exposure_messages_mean"] == ""
            assert all(e is None for e in exposures)
            continue
        assert int(row["exposure_replies"]) == len(exposures) == int(row["assistant_replies"]) > 0
        assert float(row["exposure_messages_mean"]) == pytest.approx(
            sum(len(e["earlier_message_ids"]) for e in exposures) / len(exposures))
        assert float(row["exposure_tokens_mean"]) == pytest.approx(
            sum(e["tokens"] for e in exposures) / len(exposures))
        assert float(row["exposure_profile_share"]) == pytest.approx(
            sum(e["profile_present"] or e["summary_present"] for e in exposures) / len(exposures))
        groups.add(row["memory_group"])
        if row["memory_group"] == "L1":
            assert (row["exposure_messages_mean"], row["exposure_profile_share"], row["exposure_tokens_mean"]) == (
                "0", "0", "0")
        else:
            assert float(row["exposure_tokens_mean"]) > 0
    assert {"L1", "L2", "L3", "L4"} <= groups
