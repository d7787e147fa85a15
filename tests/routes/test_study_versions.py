"""Versioned study definitions (issue 29): the contract, publishing without a restart across processes, the
version each participant and task runs under, refusals, diffs, import and export."""
from __future__ import annotations

import copy
import dataclasses

import pytest
import yaml
from sqlalchemy import select

from database.models import AuditLog, PreflightReport, StudyVersion, TaskSession, User
from services.recall.word_lists import word_list_hashes
from services.study import preflight_gate
from tests.conftest import ApiClient, walk_task

pytestmark = pytest.mark.postgres

NEW_TITLE = {"zh": "新的第一次见面", "en": "A brand-new first meeting"}


@pytest.fixture
def settings(settings):
    settings.study_refresh_seconds = 0.0  # every request checks for a new version (the default is 2 s)
    return settings


def _live(admin) -> dict:
    response = admin.get("/api/admin/study")
    assert response.status_code == 200
    return response.get_json()


def _draft_with_title(admin, title=NEW_TITLE, change=None) -> int:
    definition = copy.deepcopy(_live(admin)["definition"])
    definition["tasks"][0]["title"] = dict(title)
    if change:
        change(definition)
    response = admin.post("/api/admin/study/drafts", json={"definition": definition})
    assert response.status_code == 201, response.get_json()
    body = response.get_json()
    assert body["problems"] == [] and isinstance(body["draft_id"], int)
    return body["draft_id"]


def _publish(admin, draft_id: int, reason: str | None = "new wording") -> dict:
    response = admin.post(f"/api/admin/study/drafts/{draft_id}/publish", json={"reason": reason})
    assert response.status_code == 200, response.get_json()
    return response.get_json()


def test_the_live_study_is_the_start_up_file_as_version_1(admin_client, app, study):
    body = _live(admin_client)
    assert body["definition"] == study.as_dict()
    assert body["version"] == 1
    assert body["hash"] == preflight_gate.study_hash(study)
    runtime = app.extensions["memory_lab"]
    with runtime.db.Session() as session:
        rows = session.scalars(select(StudyVersion)).all()
    assert [(r.version, r.source, r.study_hash) for r in rows] == [(1, "file", body["hash"])]


def test_a_misspelled_key_is_refused_naming_it(admin_client):
    definition = copy.deepcopy(_live(admin_client)["definition"])
    definition["tasks"][0]["titel"] = definition["tasks"][0].pop("title")
    definition["timming"] = {}
    response = admin_client.post("/api/admin/study/drafts", json={"definition": definition})
    assert response.status_code == 400
    problems = response.get_json()["problems"]
    keys = {p["key"] for p in problems}
    assert {"timming", "tasks.T1.titel"} <= keys
    assert all(p["message"] for p in problems)
    assert next(p for p in problems if p["key"] == "timming")["code"] == "unknown_key"


def test_a_wrong_value_is_named_by_its_key(admin_client):
    definition = copy.deepcopy(_live(admin_client)["definition"])
    definition["timing"]["min_active_seconds"] = "ten"
    response = admin_client.post("/api/admin/study/drafts", json={"definition": definition})
    assert response.status_code == 400
    assert response.get_json()["problems"][0]["key"] == "timing.min_active_seconds"
    assert admin_client.post("/api/admin/study/drafts", json={"definition": [1]}).status_code == 400


def test_published_title_is_seen_by_a_participant_registering_afterwards(admin_client, app, make_participant):
    before = _live(admin_client)
    draft_id = _draft_with_title(admin_client)
    published = _publish(admin_client, draft_id, reason=None)  # nobody has taken part yet: no reason needed
    assert published["version"] == 2 and published["hash"] != before["hash"]
    after = _live(admin_client)
    assert (after["version"], after["hash"]) == (2, published["hash"])
    assert after["definition"]["tasks"][0]["title"] == NEW_TITLE
    person = make_participant(language="en")
    tasks = person.get("/api/tasks").get_json()["tasks"]
    assert tasks[0]["title"] == NEW_TITLE["en"]
    runtime = app.extensions["memory_lab"]
    with runtime.db.Session() as session:
        assert session.scalar(select(User.study_version).where(User.role == "participant")) == 2


def test_publishing_needs_a_reason_once_a_participant_exists_and_audits_it(admin_client, app, make_participant):
    make_participant()
    draft_id = _draft_with_title(admin_client)
    response = admin_client.post(f"/api/admin/study/drafts/{draft_id}/publish", json={})
    assert response.status_code == 400 and response.get_json()["error"] == "reason_required"
    assert _live(admin_client)["version"] == 1
    _publish(admin_client, draft_id, reason="clearer title for T1")
    again = admin_client.post(f"/api/admin/study/drafts/{draft_id}/publish", json={"reason": "x"})
    assert again.status_code == 409 and again.get_json()["error"] == "draft_already_published"
    runtime = app.extensions["memory_lab"]
    with runtime.db.Session() as session:
        entry = session.scalar(select(AuditLog).where(AuditLog.action == "study_published"))
    assert entry.details["reason"] == "clearer title for T1"
    assert entry.details["version"] == 2 and entry.details["previous_version"] == 1
    assert entry.actor_user_id is not None
    # the word lists recall decides with are recorded beside the definition's hash (data/recall/)
    assert entry.details["recall_word_lists"] == word_list_hashes()


def test_a_participant_mid_task_finishes_it_under_the_version_they_started(admin_client, app, make_participant,
                                                                          clock, study):
    person = make_participant(language="en")
    assert person.post("/api/tasks/T1/start").status_code == 201
    clock.advance(20)
    assert person.post("/api/tasks/T1/messages", json={"content": "Hello, I like hiking."}).status_code == 201

    def new_prompt(definition):
        definition["system_prompts"]["base"]["en"] = "VERSION-TWO BASE PROMPT"
        definition["system_prompts"]["base"]["zh"] = "第二版基础提示"

    _publish(admin_client, _draft_with_title(admin_client, change=new_prompt), reason="pilot feedback")
    # the running task keeps version 1: its title and the prompt its replies are built from
    assert person.get("/api/tasks/T1").get_json()["task"]["title"] == study.task("T1").title["en"]
    clock.advance(20)
    assert person.post("/api/tasks/T1/messages", json={"content": "And cooking."}).status_code == 201
    runtime = app.extensions["memory_lab"]
    with runtime.db.Session() as session:
        ts = session.scalar(select(TaskSession).where(TaskSession.task_id == "T1"))
        assert ts.study_version == 1
        from database.models import Message

        prompts = [m.prompt[0]["content"] for m in session.scalars(
            select(Message).where(Message.role == "assistant").order_by(Message.id))]
    assert len(prompts) == 2 and all("VERSION-TWO" not in p for p in prompts)
    while person.post("/api/tasks/T1/finish").status_code != 200:
        clock.advance(study.timing.idle_gap_seconds - 1)
    items = person.get("/api/tasks/T1/questionnaire").get_json()["items"]
    assert {i["id"] for i in items}  # the questionnaire of version 1 is answered as usual
    # a newcomer gets version 2 everywhere, replies included
    newcomer = make_participant(language="en")
    assert newcomer.get("/api/tasks").get_json()["tasks"][0]["title"] == NEW_TITLE["en"]
    assert newcomer.post("/api/tasks/T1/start").status_code == 201
    clock.advance(20)
    assert newcomer.post("/api/tasks/T1/messages", json={"content": "Hi there."}).status_code == 201
    with runtime.db.Session() as session:
        latest = session.scalars(select(Message).where(Message.role == "assistant").order_by(Message.id.desc())
                                 ).first()
        assert "VERSION-TWO BASE PROMPT" in latest.prompt[0]["content"]
        assert session.scalar(select(TaskSession.study_version).where(TaskSession.user_id == latest.user_id)) == 2


def test_changes_that_would_break_collected_data_are_refused(admin_client, make_participant, clock, study):
    person = make_participant()
    walk_task(person, clock, "T1", ["你好，我喜欢爬山。"], study=study)
    group = admin_client.get("/api/admin/participants").get_json()["participants"][0]["memory_group"]

    def rescale(definition):
        definition["instruments"]["perceived_understanding"]["items"][0]["max"] = 5

    response = admin_client.post(f"/api/admin/study/drafts/{_draft_with_title(admin_client, change=rescale)}"
                                 "/publish", json={"reason": "shorter scale"})
    assert response.status_code == 409 and response.get_json()["error"] == "breaking_change"
    assert "pu_1" in response.get_json()["message"]

    def rename(definition):
        definition["instruments"]["perceived_understanding"]["items"][0]["id"] = "pu_one"

    response = admin_client.post(f"/api/admin/study/drafts/{_draft_with_title(admin_client, change=rename)}"
                                 "/publish", json={"reason": "tidy ids"})
    assert response.status_code == 409 and "pu_1" in response.get_json()["message"]

    def drop_group(definition):
        definition["enabled_conditions"] = [c for c in definition["enabled_conditions"] if c != group]

    response = admin_client.post(f"/api/admin/study/drafts/{_draft_with_title(admin_client, change=drop_group)}"
                                 "/publish", json={"reason": "fewer groups"})
    assert response.status_code == 409
    assert any(p["key"] == "enabled_conditions" for p in response.get_json()["details"]["problems"])
    def rename_task(definition):
        definition["tasks"][0]["id"] = "Intro"
        definition["panel"]["tasks"] = {("Intro" if k == "T1" else k): v
                                        for k, v in definition["panel"]["tasks"].items()}
        definition["payments"]["per_task"] = {("Intro" if k == "T1" else k): v
                                              for k, v in definition["payments"]["per_task"].items()}

    response = admin_client.post(f"/api/admin/study/drafts/{_draft_with_title(admin_client, change=rename_task)}"
                                 "/publish", json={"reason": "nicer id"})
    assert response.status_code == 409 and "task T1" in response.get_json()["message"]
    assert _live(admin_client)["version"] == 1
    # rewording an answered item breaks nothing
    def reword(definition):
        definition["instruments"]["perceived_understanding"]["items"][0]["text"]["en"] = "It understood me."

    _publish(admin_client, _draft_with_title(admin_client, change=reword), reason="wording")


def test_the_preflight_status_turns_to_changed(admin_client, app):
    runtime = app.extensions["memory_lab"]
    with runtime.db.Session() as session:
        session.add(PreflightReport(created_at=runtime.clock.now(), study_hash=_live(admin_client)["hash"],
                                    passed=True, providers={}, checks={}))
        session.commit()
    assert admin_client.get("/api/admin/preflight").get_json()["preflight"]["state"] == "verified"
    published = _publish(admin_client, _draft_with_title(admin_client))
    status = admin_client.get("/api/admin/preflight").get_json()["preflight"]
    assert status["state"] == "changed" and status["study_hash"] == published["hash"]
    assert status["study_version"] == published["version"]


def test_a_second_app_on_the_same_database_serves_the_published_version(app, admin_client, database, clock):
    from app import create_app

    other_settings = dataclasses.replace(app.extensions["memory_lab"].settings,
                                         study=app.extensions["memory_lab"].settings.study)
    other = create_app(other_settings, clock=clock)
    try:
        assert other.extensions["memory_lab"].settings is not app.extensions["memory_lab"].settings
        other_client = ApiClient(other.test_client())
        assert other_client.register("before-publish", language="en").status_code == 201
        assert other_client.get("/api/tasks").get_json()["tasks"][0]["title"] != NEW_TITLE["en"]
        _publish(admin_client, _draft_with_title(admin_client), reason="new title")
        newcomer = ApiClient(other.test_client())
        assert newcomer.register("after-publish", language="en").status_code == 201
        assert newcomer.get("/api/tasks").get_json()["tasks"][0]["title"] == NEW_TITLE["en"]
        assert other.extensions["memory_lab"].studies.live_version == 2
    finally:
        runtime = other.extensions["memory_lab"]
        runtime.background.shutdown()
        runtime.record_failure.flush()
        runtime.db.dispose()


def test_the_start_up_file_is_imported_once_and_a_changed_file_becomes_the_next_version(app, settings, clock):
    from app import create_app

    study = settings.study
    again = create_app(dataclasses.replace(settings, study=study), clock=clock)
    changed = study.with_overrides({"name": "A renamed study"})
    third = create_app(dataclasses.replace(settings, study=changed), clock=clock)
    try:
        with third.extensions["memory_lab"].db.Session() as session:
            rows = session.scalars(select(StudyVersion).order_by(StudyVersion.version)).all()
        assert [(r.version, r.source) for r in rows] == [(1, "file"), (2, "file")]
        assert rows[1].definition["name"] == "A renamed study"
        assert third.extensions["memory_lab"].study.version == 2
    finally:
        for flask_app in (again, third):
            runtime = flask_app.extensions["memory_lab"]
            runtime.background.shutdown()
            runtime.record_failure.flush()
            runtime.db.dispose()


def test_versions_listing_diff_and_yaml_round_trip(admin_client):
    draft_id = _draft_with_title(admin_client)
    _publish(admin_client, draft_id)
    listing = admin_client.get("/api/admin/study/versions").get_json()
    assert listing["live_version"] == 2
    assert [v["ref"] for v in listing["versions"]] == ["v2", "v1"] and listing["versions"][0]["live"]
    assert listing["drafts"][0]["draft_id"] == draft_id and listing["drafts"][0]["published_version"] == 2
    changes = admin_client.get("/api/admin/study/diff?from=v1&to=v2").get_json()["changes"]
    assert {c["path"] for c in changes} == {"tasks[0].title.zh", "tasks[0].title.en"}
    assert next(c for c in changes if c["path"] == "tasks[0].title.en")["after"] == NEW_TITLE["en"]
    assert admin_client.get(f"/api/admin/study/diff?from=d{draft_id}&to=live").get_json()["changes"] == []
    assert admin_client.get("/api/admin/study/diff?from=v9&to=v1").status_code == 404

    exported = admin_client.get("/api/admin/study/export?ref=v1&format=yaml")
    assert exported.status_code == 200 and "attachment" in exported.headers["Content-Disposition"]
    text = exported.get_data(as_text=True)
    assert yaml.safe_load(text)["tasks"][0]["title"]["en"] != NEW_TITLE["en"]
    imported = admin_client.post("/api/admin/study/drafts", json={"source": text, "format": "yaml"})
    assert imported.status_code == 201
    assert imported.get_json()["hash"] == admin_client.get("/api/admin/study/versions/v1").get_json()["hash"]
    as_json = admin_client.get("/api/admin/study/export?ref=live&format=json").get_data(as_text=True)
    assert admin_client.post("/api/admin/study/drafts", json={"source": as_json, "format": "json"}
                             ).status_code == 201
    bad = admin_client.post("/api/admin/study/drafts", json={"source": "name: [", "format": "yaml"})
    assert bad.status_code == 400 and bad.get_json()["error"] == "invalid_study_source"


def test_participants_cannot_reach_the_study_api(make_participant, client):
    person = make_participant()
    assert person.get("/api/admin/study").status_code == 403
    assert person.post("/api/admin/study/drafts", json={"definition": {}}).status_code == 403
    assert client.get("/api/admin/study").status_code == 401


def test_publishing_while_participants_chat_loses_nothing(app, admin_client, make_participant, clock):
    """Participants send messages from threads while two versions are published: every message is stored with
    its reply, and every reply of a task started under version 1 is built under version 1."""
    import threading

    from database.models import Message

    people = [make_participant(language="en") for _ in range(3)]
    for person in people:
        assert person.post("/api/tasks/T1/start").status_code == 201
    sent: list[tuple[int, int]] = []
    failures: list[str] = []

    def chat(index: int, person) -> None:
        for n in range(4):
            response = person.post("/api/tasks/T1/messages", json={"content": f"message {n} from {index}"},
                                   headers={"Idempotency-Key": f"p{index}-m{n}"})
            if response.status_code != 201:
                failures.append(f"{index}/{n}: {response.status_code} {response.get_json()}")
            sent.append((index, n))

    def new_prompt(text):
        def change(definition):
            definition["system_prompts"]["base"]["en"] = text
        return change

    threads = [threading.Thread(target=chat, args=(i, p)) for i, p in enumerate(people)]
    for thread in threads:
        thread.start()
    _publish(admin_client, _draft_with_title(admin_client, change=new_prompt("VERSION-TWO")), reason="during chat")
    _publish(admin_client, _draft_with_title(admin_client, title={"zh": "第三版", "en": "Third"},
                                             change=new_prompt("VERSION-THREE")), reason="again")
    for thread in threads:
        thread.join(timeout=120)
    assert not failures and len(sent) == 12
    runtime = app.extensions["memory_lab"]
    with runtime.db.Session() as session:
        users = session.scalars(select(Message).where(Message.role == "user")).all()
        replies = session.scalars(select(Message).where(Message.role == "assistant")).all()
        versions = set(session.scalars(select(TaskSession.study_version)))
    assert len(users) == 12 and len(replies) == 12
    assert {r.reply_to_id for r in replies} == {m.id for m in users}
    assert versions == {1}
    assert not any("VERSION-" in r.prompt[0]["content"] for r in replies)
    assert _live(admin_client)["version"] == 3


def test_the_export_script_exports_the_live_version(app, admin_client, make_participant, database_url, tmp_path):
    import json
    import zipfile

    from scripts import export_data

    _publish(admin_client, _draft_with_title(admin_client))
    make_participant()
    out = tmp_path / "study.zip"
    # the script's main in this process (tests/scripts/test_export_data.py runs it as a program)
    assert export_data.main(["--out", str(out), "--database-url", database_url]) == 0
    with zipfile.ZipFile(out) as archive:
        manifest = json.loads(archive.read("manifest.json"))
        config = json.loads(archive.read("study_config.json"))
        participants = archive.read("participants.csv").decode()
    assert manifest["study_version"] == 2
    assert config["tasks"][0]["title"] == NEW_TITLE
    header, row = participants.splitlines()[:2]
    assert row.split(",")[header.split(",").index("study_version")] == "2"


def test_an_unchanged_definition_sent_by_a_browser_keeps_its_hash(admin_client):
    """JavaScript sends 1.0 as 1: the draft takes the live definition's floats back, so nothing changed."""
    import json

    live = _live(admin_client)
    as_browser = json.loads(json.dumps(live["definition"]).replace(".0,", ",").replace(".0}", "}"))
    # the definition holds whole floats (1.0), which the browser's copy writes as integers
    assert json.dumps(as_browser, sort_keys=True) != json.dumps(live["definition"], sort_keys=True)
    draft = admin_client.post("/api/admin/study/drafts", json={"definition": as_browser}).get_json()
    assert draft["hash"] == live["hash"]
    assert admin_client.get(f"/api/admin/study/diff?from=d{draft['draft_id']}&to=live").get_json()["changes"] == []


def test_a_reply_made_off_the_request_path_uses_the_task_s_version(app, admin_client, make_participant, clock):
    """The scheduler answers a message whose reply failed after a new version was published: the reply is built
    under the version the task started under, not the live one."""
    from database.models import Message
    from services.chat.chat_service import ANSWER_GRACE_SECONDS, answer_unanswered
    from services.llm.chain import LLMService
    from tests.routes.test_unanswered_messages import DownModel

    person = make_participant(language="en")
    assert person.post("/api/tasks/T1/start").status_code == 201
    runtime = app.extensions["memory_lab"]
    working = runtime.llm
    runtime.llm = LLMService([DownModel()], on_failure=runtime.record_failure)
    clock.advance(5)
    failed = person.post("/api/tasks/T1/messages", json={"content": "I have a peanut allergy."})
    assert failed.status_code == 503
    runtime.llm = working

    def new_prompt(definition):
        definition["system_prompts"]["base"]["en"] = "VERSION-TWO BASE PROMPT"

    _publish(admin_client, _draft_with_title(admin_client, change=new_prompt), reason="while a reply was due")
    clock.advance(ANSWER_GRACE_SECONDS + 1)
    assert len(answer_unanswered(runtime.for_jobs())["answered"]) == 1
    with runtime.db.Session() as session:
        reply = session.scalar(select(Message).where(Message.role == "assistant"))
    assert "VERSION-TWO" not in reply.prompt[0]["content"]
    assert runtime.settings.study.version == 2
