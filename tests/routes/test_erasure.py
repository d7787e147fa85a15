"""Erasure on request: every trace of the participant's text leaves the database and the export,
the tombstone stays, group counts and the audit trail stay right, and it cannot be repeated or undone."""
from __future__ import annotations

import io
import json
import zipfile

import pytest
from cryptography.fernet import Fernet
from sqlalchemy import inspect, select, text

from database.models import Assignment, AuditLog, User
from services.reporting.export_service import ExportOptions, export_runtime
from services.study.definition import build_study
from tests.conftest import ApiClient, walk_task

# Distinctive strings that can only come from the participant being erased.
SECRET_WORDS = ["独角兽斑马四十二", "ZEBRAUNICORN42", "梧桐巷", "花生过敏"]
MESSAGES = [f"我叫{SECRET_WORDS[0]}，住在梧桐巷，我对花生过敏。",
            f"My nickname is {SECRET_WORDS[1]} and I love hiking."]
OPEN_ANSWER = f"{SECRET_WORDS[0]}的开放回答"
CONTACT = "zebra.unicorn@example.org"
PANEL_IDS = ["panelA0001", "panelB0002", "panelC0003", "panelD0004"]

pytestmark = pytest.mark.postgres


@pytest.fixture
def settings(settings):
    definition = settings.study.as_dict()
    # an open question after T1, so a free-text answer is among what must go
    definition["tasks"][0]["questionnaire"] += ["open_questions", "attention_check"]
    settings.study = build_study(definition)
    settings.contact_encryption_key = Fernet.generate_key().decode()
    return settings


def _enter(app, external_id: str) -> ApiClient:
    api = ApiClient(app.test_client())
    response = api.post("/api/auth/panel", json={"external_id": external_id, "consent": True})
    assert response.status_code == 201, response.get_json()
    return api


def _answers_with_open_text(api: ApiClient, items: list[dict]) -> dict:
    from tests.conftest import answer_for

    answers = {i["id"]: answer_for(i) for i in items if i["type"] not in ("text", "attention")}
    answers["open_1"] = OPEN_ANSWER
    answers["attn_1"] = 5  # a failed attention check is among the answers too
    return answers


def _walk_with_open_answer(api: ApiClient, clock, study) -> None:
    assert api.post("/api/tasks/T1/start").status_code == 201
    for content in MESSAGES:
        clock.advance(100)
        response = api.post("/api/tasks/T1/messages", json={"content": content, "typing_ms": 5000, "keystrokes": 40,
                                                            "pasted_chars": 12, "focus_losses": 1})
        assert response.status_code == 201
    clock.advance(study.timing.idle_gap_seconds - 1)
    clock.advance(study.timing.idle_gap_seconds - 1)
    while api.post("/api/tasks/T1/finish").status_code != 200:
        clock.advance(study.timing.idle_gap_seconds - 1)
    items = api.get("/api/tasks/T1/questionnaire").get_json()["items"]
    response = api.post("/api/tasks/T1/questionnaire", json={"answers": _answers_with_open_text(api, items)})
    assert response.status_code == 201, response.get_json()


def _unescaped_json(raw: str) -> str:
    """JSON columns may store text as \\u escapes: read them back as the characters they stand for."""
    try:
        return json.dumps(json.loads(raw), ensure_ascii=False)
    except (ValueError, TypeError):
        return ""


def _traces(engine, needles: list[str]) -> list[str]:
    """Every (table.column) whose stored value contains one of the needles, over every column of every table."""
    found = []
    with engine.connect() as conn:
        for table in inspect(engine).get_table_names():
            if table == "alembic_version":
                continue
            for column in inspect(engine).get_columns(table):
                name = column["name"]
                for (value,) in conn.execute(text(f'SELECT "{name}" FROM "{table}"')):
                    if value is None:
                        continue
                    if isinstance(value, memoryview):
                        value = bytes(value)
                    as_text = value.decode("utf-8", "ignore") if isinstance(value, bytes) else str(value)
                    as_text += _unescaped_json(as_text)
                    for needle in needles:
                        if needle in as_text:
                            found.append(f"{table}.{name}")
    return sorted(set(found))


def test_erasure_removes_every_trace_and_keeps_the_tombstone(app, clock, study, admin_client):
    runtime = app.extensions["memory_lab"]
    clients = {pid: _enter(app, pid) for pid in PANEL_IDS}
    with runtime.db.Session() as session:
        groups = {u.external_id: u.memory_group
                  for u in session.scalars(select(User).where(User.role == "participant"))}
    # erase someone in a condition that keeps a profile, so profiles and summaries are among what must go
    target = next(pid for pid in PANEL_IDS if groups[pid] in ("L3", "L4"))
    api = clients[target]
    _walk_with_open_answer(api, clock, study)
    assert api.post("/api/me/contact", json={"channel": "email", "value": CONTACT}).status_code == 200
    assert api.get("/api/me/return-link").status_code == 200
    for other in PANEL_IDS:
        if other != target:
            walk_task(clients[other], clock, "T1", ["别人的对话，不应被删除。"], study=study)
    user_id = api.get("/api/auth/me").get_json()["user"]["id"]
    code = api.get("/api/auth/me").get_json()["user"]["participant_code"]

    needles = SECRET_WORDS + [target, CONTACT]
    before = _traces(runtime.db.engine, needles)
    # the scan finds the participant's text where it was written (so its silence afterwards means something)
    assert {"messages.content", "questionnaire_responses.value", "users.external_id"} <= set(before), before
    assert {"profile_versions.rendered", "profile_versions.content"} <= set(before), before
    summary_before = admin_client.get("/api/admin/participants").get_json()["summary"]

    url = f"/api/admin/participants/{user_id}/erase"
    assert admin_client.post(url, json={"reason": "participant asked"}).get_json()["error"] == "confirmation_required"
    assert admin_client.post(url, json={"confirm": True}).get_json()["error"] == "reason_required"
    response = admin_client.post(url, json={"confirm": True, "reason": "participant asked by e-mail"})
    assert response.status_code == 200, response.get_json()
    tomb = response.get_json()["tombstone"]
    assert tomb["participant_code"] == code and tomb["memory_group"] == groups[target]
    assert tomb["status"] == "erased" and tomb["erased_at"] and tomb["enrolled_at"]
    assert tomb["erasure_reason"] == "participant asked by e-mail"
    assert tomb["assignment_slot"] is not None and tomb["assignment_block"] is not None

    # the database: no trace of their text, panel id or address in any column of any table
    assert _traces(runtime.db.engine, needles) == []
    # the rest of the study is untouched
    assert "messages.content" in _traces(runtime.db.engine, ["别人的对话"])
    with runtime.db.Session() as session:
        assert session.scalar(select(Assignment).where(Assignment.user_id == user_id)) is not None
        audit = session.scalars(select(AuditLog).where(AuditLog.target_user_id == user_id)).all()
        assert {"assignment", "panel_entry", "participant_erased"} <= {a.action for a in audit}

    # reads answer with the tombstone only
    record = admin_client.get(f"/api/admin/participants/{user_id}").get_json()
    assert record["erased"] is True and record["tombstone"] == tomb
    assert set(record) == {"erased", "tombstone", "audit"}
    assert all(set(a) == {"at", "action", "actor_user_id"} for a in record["audit"])
    assert api.get("/api/tasks").status_code == 401  # their session ends with the erasure

    # balance: the same participants per group as before, the erased one among them
    summary_after = admin_client.get("/api/admin/participants").get_json()["summary"]
    assert summary_after["groups"] == summary_before["groups"]
    assert summary_after["funnel"]["registered"] == summary_before["funnel"]["registered"]
    assert summary_after["statuses"]["erased"] == 1

    # a new export shows the erasure and holds nothing of what was erased
    result = export_runtime(runtime, options=ExportOptions())
    archive = zipfile.ZipFile(io.BytesIO(result.data))
    for name in archive.namelist():
        content = archive.read(name).decode("utf-8-sig")
        for needle in needles:
            assert needle not in content, (name, needle)
    participants = archive.read("participants.csv").decode("utf-8")
    import csv

    row = next(r for r in csv.DictReader(io.StringIO(participants)) if r["participant_code"] == code)
    assert row["status"] == "erased" and row["erased_at"] and row["memory_group"] == groups[target]
    assert row["tasks_done"] == "0" and row["user_messages"] == "0"

    # irreversible and not repeatable
    assert admin_client.post(url, json={"confirm": True, "reason": "again"}).status_code == 409
    assert admin_client.post(f"/api/admin/participants/{user_id}/withdraw", json={}).status_code == 409
    # the panel id leads neither back to the erased account nor to a new, naive one (issue 28 item 2)
    again = ApiClient(app.test_client()).post("/api/auth/panel", json={"external_id": target, "consent": True})
    assert again.status_code == 403 and again.get_json()["error"] == "panel_id_closed"


def test_erasure_needs_the_admin_role(app, make_participant):
    api = make_participant()
    user_id = api.get("/api/auth/me").get_json()["user"]["id"]
    response = api.post(f"/api/admin/participants/{user_id}/erase", json={"confirm": True, "reason": "me"})
    assert response.status_code == 403


def test_erasure_empties_this_process_recall_cache(app, clock, study, admin_client):
    from services.memory.hybrid import ForgettingCurveSearch
    from services.recall.candidates import _content_words, content_words

    api = _enter(app, PANEL_IDS[0])
    walk_task(api, clock, "T1", [MESSAGES[0]], study=study)
    user_id = api.get("/api/auth/me").get_json()["user"]["id"]
    # what a recall leaves behind in this process: the participant's index and their texts' content words
    key = ("this-database", user_id, "model")
    with ForgettingCurveSearch._cache_lock:
        ForgettingCurveSearch._cache[key] = object()
        ForgettingCurveSearch._last_used[key] = 0.0
    content_words(MESSAGES[0])
    assert _content_words.cache_info().currsize > 0
    url = f"/api/admin/participants/{user_id}/erase"
    assert admin_client.post(url, json={"confirm": True, "reason": "asked"}).status_code == 200
    assert key not in ForgettingCurveSearch._cache and key not in ForgettingCurveSearch._last_used
    assert _content_words.cache_info().currsize == 0


# Issue 19, item 12: what an erasure leaves outside the rows it deletes.
FILE_SECRET = "WALSECRET7c1e9aQUOKKA"  # ASCII, so it is stored as these very bytes wherever it is copied


def test_erased_text_leaves_the_database_files(app, clock, study, admin_client, database_url):
    """SQLite: no copy of an erased message stays in the write-ahead log or in the database file's free
    space. PostgreSQL: the tables the erasure deleted from are vacuumed (their dead rows cleared) at once."""
    runtime = app.extensions["memory_lab"]
    api = _enter(app, PANEL_IDS[0])
    walk_task(api, clock, "T1", [f"My secret word is {FILE_SECRET}.", f"Again: {FILE_SECRET}!"], study=study)
    user_id = api.get("/api/auth/me").get_json()["user"]["id"]
    sqlite = database_url.startswith("sqlite")
    if sqlite:
        path = database_url.removeprefix("sqlite:///")
        files = [path, path + "-wal"]

        def copies() -> int:
            found = 0
            for name in files:
                try:
                    with open(name, "rb") as handle:
                        found += handle.read().count(FILE_SECRET.encode())
                except FileNotFoundError:
                    pass
            return found

        assert copies() > 0  # the scan finds the text where it was written
    else:
        last_vacuum = text("SELECT last_vacuum FROM pg_stat_user_tables WHERE relname = 'messages'")
        with runtime.db.engine.connect() as conn:
            before = conn.execute(last_vacuum).scalar()
    url = f"/api/admin/participants/{user_id}/erase"
    assert admin_client.post(url, json={"confirm": True, "reason": "asked"}).status_code == 200
    if sqlite:
        assert copies() == 0
    else:
        with runtime.db.engine.connect() as conn:
            after = conn.execute(last_vacuum).scalar()
        assert after is not None and after != before


def test_erasure_removes_the_participants_rate_limit_counters(settings, clock, database):
    """Counters keyed by the erased participant's name or account go with the erasure (the database store,
    as `make serve` uses)."""
    from app import create_app
    from database.models import RateLimitCounter
    from database.rate_limit_store import login_subject
    from services.participants.account_service import create_admin
    from tests.conftest import ADMIN_PASSWORD

    settings.rate_limits_enabled = True
    settings.rate_limit_storage = "database"
    app = create_app(settings, clock=clock)
    try:
        runtime = app.extensions["memory_lab"]
        with runtime.db.Session() as session:
            create_admin(session, "labadmin", ADMIN_PASSWORD, runtime.clock)
        admin = ApiClient(app.test_client())
        assert admin.login("labadmin", ADMIN_PASSWORD).status_code == 200
        api = ApiClient(app.test_client())
        assert api.register("Counted.Name").status_code == 201
        assert api.post("/api/tasks/T1/start").status_code == 201
        assert api.post("/api/tasks/T1/messages", json={"content": "hello"}).status_code == 201  # user:<id> key
        assert api.login("COUNTED.name", "wrong-password").status_code == 401  # the name's login key
        user_id = api.get("/api/auth/me").get_json()["user"]["id"]

        def theirs() -> list[str]:
            with database.Session() as session:
                keys = session.scalars(select(RateLimitCounter.key)).all()
            return [k for k in keys if login_subject("counted.name") in k or f"/user:{user_id}." in k
                    or "counted" in k.lower()]

        assert len(theirs()) >= 2
        response = admin.post(f"/api/admin/participants/{user_id}/erase", json={"confirm": True, "reason": "asked"})
        assert response.status_code == 200, response.get_json()
        assert theirs() == []
        with database.Session() as session:  # counters of others (here: the address's registrations) stay
            assert any("/register:" in k for k in session.scalars(select(RateLimitCounter.key)))
    finally:
        runtime.db.dispose()
