"""Issue 11, items 1 and 5: text that cannot be stored is refused with a 400 at every input, text
already stored never breaks the export or the admin views, and the CSV export cannot carry formulas."""
from __future__ import annotations

import csv
import io
import json
import zipfile

import pytest
from sqlalchemy import func, select

from database.models import Message, ProfileVersion, QuestionnaireResponse, User
from scripts import export_data
from tests.conftest import ADMIN_PASSWORD, ApiClient, answer_for

SURROGATE = "\udc80"
BAD_TEXTS = [f"hello {SURROGATE}", "hello\x00world"]


@pytest.fixture
def settings(settings):
    """T1 asks the open questions too, so a free-text answer is one task away."""
    tasks = settings.study.as_dict()["tasks"]
    tasks[0]["questionnaire"] = [*tasks[0]["questionnaire"], "open_questions"]
    settings.study = settings.study.with_overrides({"tasks": tasks})
    return settings


def to_questionnaire(api: ApiClient, clock, study, task_id: str = "T1") -> list[dict]:
    assert api.post(f"/api/tasks/{task_id}/start").status_code == 201
    clock.advance(5)
    assert api.post(f"/api/tasks/{task_id}/messages", json={"content": "我今天很开心"}).status_code == 201
    while True:
        clock.advance(study.timing.idle_gap_seconds - 1)
        if api.post(f"/api/tasks/{task_id}/finish").status_code == 200:
            break
    return api.get(f"/api/tasks/{task_id}/questionnaire").get_json()["items"]


def count(app, model) -> int:
    with app.extensions["memory_lab"].db.Session() as session:
        return session.scalar(select(func.count(model.id)))


@pytest.mark.postgres
@pytest.mark.parametrize("bad", BAD_TEXTS)
def test_bad_text_in_an_open_answer_is_400_and_nothing_is_stored(app, make_participant, clock, settings, bad):
    api = make_participant("opener")
    items = to_questionnaire(api, clock, settings.study)
    answers = {i["id"]: answer_for(i) for i in items}
    answers["open_1"] = bad
    response = api.post("/api/tasks/T1/questionnaire", json={"answers": answers})
    assert response.status_code == 400, response.get_data(as_text=True)
    body = response.get_json()
    assert body["error"] == "invalid_text" and "open_1" in body["details"]["field"]
    assert count(app, QuestionnaireResponse) == 0
    answers["open_1"] = "fine"
    assert api.post("/api/tasks/T1/questionnaire", json={"answers": answers}).status_code == 201


@pytest.mark.postgres
@pytest.mark.parametrize("bad", BAD_TEXTS)
def test_bad_text_in_a_chat_message_is_400_and_the_task_goes_on(app, make_participant, clock, bad):
    api = make_participant("chatter")
    api.post("/api/tasks/T1/start")
    clock.advance(5)
    response = api.post("/api/tasks/T1/messages", json={"content": bad})
    assert response.status_code == 400
    assert response.get_json()["error"] == "invalid_text"
    assert count(app, Message) == 0
    assert api.post("/api/tasks/T1/messages", json={"content": "ok now"}).status_code == 201


@pytest.mark.postgres
@pytest.mark.parametrize("bad", BAD_TEXTS)
def test_bad_text_in_credentials_is_400(app, client, make_participant, bad):
    assert client.register("newcomer", password=f"strong-{bad}-pass").status_code == 400
    assert client.register(f"x{bad}yz", password="strong-pass-1").status_code == 400
    assert count(app, User) == 0
    make_participant("known01", password="strong-pass-1")
    fresh = ApiClient(app.test_client())
    response = fresh.login("known01", f"strong-{bad}")
    assert response.status_code == 400 and response.get_json()["error"] == "invalid_text"


@pytest.mark.postgres
@pytest.mark.parametrize("bad", BAD_TEXTS)
def test_bad_text_in_admin_reasons_and_keys_is_400(app, admin_client, make_participant, bad):
    make_participant("leaver")
    with app.extensions["memory_lab"].db.Session() as session:
        user_id = session.scalar(select(User.id).where(User.username == "leaver"))
    response = admin_client.post(f"/api/admin/participants/{user_id}/withdraw", json={"reason": bad})
    assert response.status_code == 400 and response.get_json()["error"] == "invalid_text"
    response = admin_client.post(f"/api/admin/participants/{user_id}/withdraw", json={bad: "x"})
    assert response.status_code == 400
    response = admin_client.post(f"/api/admin/participants/{user_id}/tasks/T1/reset", json={"reason": bad})
    assert response.status_code == 400
    with app.extensions["memory_lab"].db.Session() as session:
        assert session.get(User, user_id).status == "active"


def plant_bad_rows(app, user_id: int) -> None:
    """Rows as they could be stored before input was checked (JSON columns keep a surrogate as \\udc80)."""
    runtime = app.extensions["memory_lab"]
    with runtime.db.session() as session:
        answer = session.scalar(select(QuestionnaireResponse).where(QuestionnaireResponse.item_id == "open_1"))
        answer.value = f"=HYPERLINK(\"http://evil\") {SURROGATE}"
        message = session.scalar(select(Message).where(Message.role == "user", Message.user_id == user_id))
        message.content = "@SUM(1+1)\x00 and a NUL"
        reply = session.scalar(select(Message).where(Message.reply_to_id == message.id))
        reply.memory_context = {"note": f"=cmd\x00 {SURROGATE}"}
        session.add(ProfileVersion(user_id=user_id, kind="gist", version=99, task_id="T1",
                                   content={"facts": [f"likes {SURROGATE}"]}, rendered="+cmd|' /C calc'!A0",
                                   source="offline", created_at=runtime.clock.now()))


def test_stored_bad_text_never_breaks_the_export_or_the_admin_views(app, make_participant, clock, settings,
                                                                      database_url, tmp_path):
    api = make_participant("legacy")
    items = to_questionnaire(api, clock, settings.study)
    answers = {i["id"]: answer_for(i) for i in items}
    answers["open_1"] = "placeholder"
    assert api.post("/api/tasks/T1/questionnaire", json={"answers": answers}).status_code == 201
    with app.extensions["memory_lab"].db.Session() as session:
        user_id = session.scalar(select(User.id).where(User.username == "legacy"))
    plant_bad_rows(app, user_id)

    from services.participants.account_service import create_admin

    with app.extensions["memory_lab"].db.Session() as session:
        create_admin(session, "labadmin", ADMIN_PASSWORD, app.extensions["memory_lab"].clock)
    admin = ApiClient(app.test_client())
    assert admin.login("labadmin", ADMIN_PASSWORD).status_code == 200
    record = admin.get(f"/api/admin/participants/{user_id}")
    assert record.status_code == 200
    assert "\\udc80" in record.get_data(as_text=True)  # shown losslessly, as a JSON escape
    assert admin.get("/api/admin/participants").status_code == 200
    assert api.get("/api/tasks/T1").status_code == 200

    response = admin.get("/api/admin/export")
    assert response.status_code == 200
    with zipfile.ZipFile(io.BytesIO(response.data)) as archive:
        long_rows = list(csv.DictReader(io.StringIO(archive.read("questionnaires_long.csv").decode())))
        messages = list(csv.DictReader(io.StringIO(archive.read("messages.csv").decode())))
        profiles = list(csv.DictReader(io.StringIO(archive.read("profiles.csv").decode())))
        contexts = archive.read("reply_contexts.jsonl").decode()
    open_answer = next(r for r in long_rows if r["item_id"] == "open_1")["text_answer"]
    assert open_answer == "'=HYPERLINK(\"http://evil\") \ufffd"
    assert next(r for r in messages if r["role"] == "user")["text"] == "'@SUM(1+1) and a NUL"
    assert any(r["rendered"] == "'+cmd|' /C calc'!A0" for r in profiles)
    assert '"=cmd\\u0000 \\udc80"' in contexts  # the JSON file keeps the raw text, escaped by JSON

    out = tmp_path / "cli.zip"
    result = app.test_cli_runner().invoke(args=["export", "--out", str(out)])
    assert result.exit_code == 0, result.output
    # the script's main in this process (tests/scripts/test_export_data.py runs it as a program)
    assert export_data.main(["--out", str(tmp_path / "script.zip"), "--database-url", database_url]) == 0


def test_formula_cells_are_escaped_by_default_and_documented(app, make_participant, admin_client, clock):
    api = make_participant("formulas")
    api.post("/api/tasks/T1/start")
    texts = ["=1+1", "+SUM(A1)", "-2+3", "@cmd", "\tTAB", "\rCR", "-2", "plain"]
    for text in texts:
        clock.advance(5)
        assert api.post("/api/tasks/T1/messages", json={"content": text}).status_code == 201
    response = admin_client.get("/api/admin/export")
    with zipfile.ZipFile(io.BytesIO(response.data)) as archive:
        rows = list(csv.DictReader(io.StringIO(archive.read("messages.csv").decode(), newline="")))
        codebook = archive.read("codebook.md").decode()
        manifest = json.loads(archive.read("manifest.json"))
    sent = [r["text"] for r in rows if r["role"] == "user"]
    # the message is stripped before it is stored, so tab and CR survive only inside the text
    assert sent == ["'=1+1", "'+SUM(A1)", "'-2+3", "'@cmd", "TAB", "CR", "-2", "plain"]
    assert "apostrophe" in codebook and "CSV injection" in codebook
    assert manifest["options"]["escape_formulas"] is True
    raw = admin_client.get("/api/admin/export?escape_formulas=0")
    with zipfile.ZipFile(io.BytesIO(raw.data)) as archive:
        rows = list(csv.DictReader(io.StringIO(archive.read("messages.csv").decode(), newline="")))
        assert "NOT escaped" in archive.read("codebook.md").decode()
    assert [r["text"] for r in rows if r["role"] == "user"][:2] == ["=1+1", "+SUM(A1)"]


def test_tab_and_cr_at_the_start_of_a_cell_are_escaped():
    from services.text.cells import safe_cell

    assert safe_cell("\t=1", escape_formulas=True) == "'\t=1"
    assert safe_cell("\r=1", escape_formulas=True) == "'\r=1"
    assert safe_cell("a\x00b", escape_formulas=True) == "ab"
    assert safe_cell(-2.5, escape_formulas=True) == "-2.5"  # a number: written at the stated precision, never escaped
    assert safe_cell("=1", escape_formulas=False) == "=1"
