"""Panel integrity (issue 18 items 1, 2, 3, 6, 7, 13; issue 19 item 4): a panel id is not a secret, so a
known id enters only from its own browser or through the personal return link; invented ids are kept out
by an allowlist and a cap; no code or pay without the task; return links do not pile up."""
from __future__ import annotations

import csv
import io
import threading
import zipfile
from concurrent.futures import ThreadPoolExecutor

import pytest
from sqlalchemy import func, select

from database.models import AuditLog, PanelDevice, PanelEntry, ReturnLink, TaskSession, User
from services.participants import panel_service
from services.reporting.export_service import ExportOptions, export_runtime
from tests.conftest import ApiClient, answer_for, walk_task

PID = "5f8a1c2e9b3d4a0012345678"
THREE = ["你好，我叫小林。", "我喜欢在周末爬山。", "下次再聊。"]


@pytest.fixture
def settings(settings):
    settings.study = settings.study.with_overrides({
        "panel": {"id_parameter": "PROLIFIC_PID", "tasks": {
            task_id: {"completion_code": f"C{task_id[1]}DONE", "incomplete_code": f"C{task_id[1]}TIMEDOUT",
                      "redirect_url": "https://app.prolific.com/submissions/complete?cc={completion_code}",
                      "incomplete_redirect_url": "https://app.prolific.com/submissions/complete?cc={completion_code}"}
            for task_id in ("T1", "T2", "T3", "T4")}},
        "payments": {"currency": "GBP", "per_task": {"T1": 1.5, "T2": 2.0, "T3": 2.0, "T4": 2.5},
                     "completion_bonus": 3.0},
    })
    return settings


def _browser(app) -> ApiClient:
    return ApiClient(app.test_client())


def _enter(api: ApiClient, external_id: str = PID, **extra):
    return api.post("/api/auth/panel", json={"external_id": external_id, "consent": True, **extra})


def _runtime(app):
    return app.extensions["memory_lab"]


# -- item 1: a known id needs its own browser or the personal link --------------------------------------


@pytest.mark.postgres
def test_a_second_browser_with_a_known_id_is_refused_reads_nothing_and_is_audited(app, admin_client, clock, study):
    victim = _browser(app)
    assert _enter(victim).status_code == 201
    assert victim.post("/api/tasks/T1/start").status_code == 201
    assert victim.post("/api/tasks/T1/messages", json={"content": "我的秘密是我怕黑。"}).status_code == 201

    intruder = _browser(app)
    refused = _enter(intruder)
    assert refused.status_code == 403 and refused.get_json()["error"] == "panel_reentry_refused"
    assert intruder.get("/api/tasks/T1").status_code == 401  # not logged in: reads no chat
    assert intruder.get("/api/me/return-link").status_code == 401
    assert intruder.post("/api/auth/panel", json={"external_id": PID}).status_code == 403  # nor without consent

    with _runtime(app).db.Session() as session:
        user = session.scalar(select(User).where(User.external_id == PID))
        audits = session.scalars(select(AuditLog).where(AuditLog.action == "panel_reentry_refused")).all()
        assert [a.target_user_id for a in audits] == [user.id, user.id]
        outcomes = session.scalars(select(PanelEntry.outcome).order_by(PanelEntry.id)).all()
        assert outcomes == ["created", "refused", "refused"]
    integrity = admin_client.get("/api/admin/participants").get_json()["integrity"]
    assert integrity["panel_entries"]["refused"] == 2 and integrity["panel_entries"]["created"] == 1


def test_the_device_cookie_is_long_lived_httponly_lax_and_only_its_hash_is_stored(app):
    browser = _browser(app)
    response = _enter(browser)
    cookie = next(c for c in response.headers.getlist("Set-Cookie") if c.startswith(panel_service.DEVICE_COOKIE))
    assert "HttpOnly" in cookie and "SameSite=Lax" in cookie and "Max-Age=34560000" in cookie
    token = cookie.split("=", 1)[1].split(";", 1)[0]
    with _runtime(app).db.Session() as session:
        stored = session.scalars(select(PanelDevice.token_hash)).all()
    assert stored == [panel_service.device_hash(token)] and token not in stored


def test_the_same_browser_comes_back_without_consent_in_its_accounts_language(app):
    """Item 13: the next wave's panel link in the same browser: no consent again, the account's language."""
    browser = _browser(app)
    assert _enter(browser, language="en").status_code == 201
    assert browser.post("/api/auth/logout").status_code == 200  # the login session is gone, the device stays
    back = browser.post("/api/auth/panel", json={"external_id": PID, "language": "zh",
                                                 "session": {"STUDY_ID": "wave2", "SESSION_ID": "s-2"}})
    assert back.status_code == 200, back.get_json()
    assert back.get_json()["created"] is False and back.get_json()["user"]["language"] == "en"
    assert browser.get("/api/tasks").status_code == 200


def test_the_personal_link_lets_a_new_browser_in_and_binds_it(app, admin_client, clock, study):
    first = _browser(app)
    assert _enter(first).status_code == 201
    walk_task(first, clock, "T1", THREE, study=study)
    token = first.get("/api/me/return-link").get_json()["url"].rsplit("/r/", 1)[1]

    phone = _browser(app)
    assert _enter(phone).status_code == 403  # a new browser, the panel link alone
    assert phone.get(f"/r/{token}").status_code == 302
    assert _enter(phone).status_code == 200  # bound by the link: the panel link works here from now on

    # a participant who lost every link: the admin issues a new one, and it lets them in elsewhere
    user_id = first.get("/api/auth/me").get_json()["user"]["id"]
    laptop = _browser(app)
    assert _enter(laptop).status_code == 403
    reissued = admin_client.post(f"/api/admin/participants/{user_id}/return-link").get_json()
    assert reissued["return_links"]["live"] == 1
    assert laptop.get(reissued["url"].split("localhost", 1)[1]).status_code == 302
    assert _enter(laptop).status_code == 200


@pytest.mark.postgres
def test_session_parameters_are_stored_for_every_entry_and_exported(app, clock):
    browser = _browser(app)
    assert _enter(browser, session={"STUDY_ID": "study-a", "SESSION_ID": "sess-1", "OTHER": "ignored"}
                  ).status_code == 201
    clock.advance(60)
    assert _enter(browser, session={"STUDY_ID": "study-a", "SESSION_ID": "sess-2"}).status_code == 200
    assert _enter(browser, session={"SESSION_ID": "x" * 200}).status_code == 400
    runtime = _runtime(app)
    with runtime.db.Session() as session:
        rows = session.scalars(select(PanelEntry).order_by(PanelEntry.id)).all()
        assert [(r.outcome, r.via, r.session_params) for r in rows] == [
            ("created", "new", {"STUDY_ID": "study-a", "SESSION_ID": "sess-1"}),
            ("returned", "session", {"STUDY_ID": "study-a", "SESSION_ID": "sess-2"})]
    archive = zipfile.ZipFile(io.BytesIO(export_runtime(runtime, options=ExportOptions()).data))
    name = next(n for n in archive.namelist() if n.endswith("panel_entries.csv"))
    exported = list(csv.DictReader(io.StringIO(archive.read(name).decode("utf-8"))))
    assert [(r["outcome"], r["param_STUDY_ID"], r["param_SESSION_ID"]) for r in exported] == [
        ("created", "study-a", "sess-1"), ("returned", "study-a", "sess-2")]
    codebook = archive.read(next(n for n in archive.namelist() if n.endswith("codebook.csv"))).decode("utf-8")
    assert "param_SESSION_ID" in codebook and "panel_entries.csv" in codebook


# -- item 2: allowlist, cap, never started ---------------------------------------------------------------


def test_only_ids_on_the_allowlist_become_accounts(app, tmp_path):
    allowlist = tmp_path / "prolific_export.csv"
    allowlist.write_text("Submission id,Participant id,Status\nsub1,AAA111bbb,APPROVED\nsub2,ccc222,APPROVED\n",
                         encoding="utf-8")
    _runtime(app).settings.panel_allowlist_path = str(allowlist)
    invented = [_enter(_browser(app), f"invented{n}") for n in range(5)]
    assert {(r.status_code, r.get_json()["error"]) for r in invented} == {(403, "panel_id_not_expected")}
    assert _enter(_browser(app), "aaa111BBB").status_code == 201  # listed (ids compare case-insensitively)
    with _runtime(app).db.Session() as session:
        assert session.scalar(select(func.count(User.id)).where(User.role == "participant")) == 1
        assert session.scalar(select(func.count(PanelEntry.id)).where(PanelEntry.outcome == "not_allowed")) == 5


def _break_allowlist(path, kind: str) -> None:
    if kind == "deleted":
        path.unlink()
    elif kind == "unreadable":  # the path now names a folder (tests run as root: permissions stop nobody)
        path.unlink()
        path.mkdir()
    elif kind == "not_utf8":
        path.write_bytes(b"Participant id\n\xff\xfe\x00abc\n")
    elif kind == "empty":
        path.write_text("", encoding="utf-8")
    elif kind == "header_only":
        path.write_text("Submission id,Participant id,Status\n", encoding="utf-8")
    elif kind == "malformed_lines":
        path.write_text("Participant id,Status\nAAA111bbb,APPROVED\nnot an id!,APPROVED\n,APPROVED\n",
                        encoding="utf-8")


@pytest.mark.parametrize("kind", ["deleted", "unreadable", "not_utf8", "empty", "header_only", "malformed_lines"])
def test_an_allowlist_that_cannot_be_used_turns_new_ids_away_with_503_and_tells_the_admin(
        app, admin_client, tmp_path, caplog, kind):
    """Fail closed: whatever is wrong with the allowlist, nobody new gets in, the answer says so (503 with its
    own code), the arrival is counted in the monitor and the reason is logged; known participants return."""
    allowlist = tmp_path / "prolific_export.csv"
    allowlist.write_text("Participant id\nAAA111bbb\nccc222\n", encoding="utf-8")
    _runtime(app).settings.panel_allowlist_path = str(allowlist)
    listed = _browser(app)
    assert _enter(listed, "ccc222").status_code == 201
    _break_allowlist(allowlist, kind)

    with caplog.at_level("ERROR", logger="services.participants.panel_service"):
        refused = _enter(_browser(app), "AAA111bbb")
    assert refused.status_code == 503, refused.get_data(as_text=True)
    assert refused.get_json()["error"] == "panel_allowlist_unavailable"
    assert str(allowlist) not in refused.get_data(as_text=True)  # the file's place is for the admin only
    assert any(str(allowlist) in r.getMessage() and r.levelname == "ERROR" for r in caplog.records)
    assert _enter(listed, "ccc222").status_code == 200  # a known participant's own browser still enters
    with _runtime(app).db.Session() as session:
        assert session.scalar(select(func.count(User.id)).where(User.role == "participant")) == 1
    integrity = admin_client.get("/api/admin/participants").get_json()["integrity"]
    assert integrity["panel_entries"]["allowlist_unavailable"] == 1


def test_start_up_warns_about_an_allowlist_that_cannot_be_used(settings, clock, database, tmp_path, caplog):
    from app import create_app

    allowlist = tmp_path / "expected.csv"
    allowlist.write_text("Participant id\n", encoding="utf-8")
    settings.panel_allowlist_path = str(allowlist)
    with caplog.at_level("WARNING", logger="memory_lab"):
        flask_app = create_app(settings, clock=clock)
    flask_app.extensions["memory_lab"].db.dispose()
    assert any("PANEL_ALLOWLIST" in r.getMessage() and "no participant ids" in r.getMessage()
               for r in caplog.records if r.levelname == "WARNING")


def test_the_cap_turns_new_ids_away_with_the_panels_code_but_lets_participants_back(app, admin_client):
    runtime = _runtime(app)
    runtime.settings.study = runtime.study.with_overrides({"panel": {
        "max_participants": 2, "full_code": "NOPLACES",
        "full_redirect_url": "https://app.prolific.com/submissions/complete?cc={completion_code}"}})
    first, second = _browser(app), _browser(app)
    assert _enter(first, "first01").status_code == 201 and _enter(second, "second02").status_code == 201
    full = _enter(_browser(app), "third03")
    assert full.status_code == 409 and full.get_json()["error"] == "study_full"
    assert full.get_json()["details"] == {
        "completion_code": "NOPLACES", "redirect_url": "https://app.prolific.com/submissions/complete?cc=NOPLACES"}
    assert _enter(first, "first01").status_code == 200  # a returning participant is not a new place
    integrity = admin_client.get("/api/admin/participants").get_json()["integrity"]
    assert integrity["panel_entries"]["full"] == 1
    assert integrity["consented_never_started"] == 2


@pytest.mark.postgres
def test_simultaneous_entries_for_the_last_place_let_exactly_one_in(app):
    """The cap is counted and the account created under one lock: six new ids arriving at once for the one
    place left make one account, and the other five get the study-full answer."""
    runtime = _runtime(app)
    runtime.settings.study = runtime.study.with_overrides({"panel": {"max_participants": 2, "full_code": "NOPLACES"}})
    assert _enter(_browser(app), "early01").status_code == 201
    browsers = [_browser(app) for _ in range(6)]
    for browser in browsers:
        browser.csrf()
    start = threading.Barrier(len(browsers), timeout=10)

    def enter(numbered: tuple[int, ApiClient]) -> tuple[int, str | None]:
        n, browser = numbered
        start.wait()
        response = _enter(browser, f"racer{n:02d}")
        return response.status_code, (response.get_json() or {}).get("error")

    with ThreadPoolExecutor(len(browsers)) as pool:
        outcomes = sorted(pool.map(enter, enumerate(browsers)), key=str)
    assert outcomes == [(201, None)] + [(409, "study_full")] * 5, outcomes
    with runtime.db.Session() as session:
        assert session.scalar(select(func.count(User.id)).where(User.external_id.is_not(None))) == 2
        assert session.scalar(select(func.count(PanelEntry.id)).where(PanelEntry.outcome == "full")) == 5


# -- item 3: minimum engagement -----------------------------------------------------------------------------


def _questionnaire(api: ApiClient, task_id: str):
    items = api.get(f"/api/tasks/{task_id}/questionnaire").get_json()["items"]
    return api.post(f"/api/tasks/{task_id}/questionnaire", json={"answers": {i["id"]: answer_for(i) for i in items}})


def test_heartbeats_alone_earn_no_code_and_no_pay(app, admin_client, clock, study):
    browser = _browser(app)
    assert _enter(browser).status_code == 201
    assert browser.post("/api/tasks/T1/start").status_code == 201
    while True:  # the page stays open and sends heartbeats; the participant writes nothing
        clock.advance(study.timing.idle_gap_seconds - 1)
        assert browser.post("/api/tasks/T1/heartbeat").status_code == 200
        if browser.post("/api/tasks/T1/finish").status_code == 200:
            break
    done = _questionnaire(browser, "T1")
    assert done.status_code == 201
    assert done.get_json()["completion"] == {"completion_code": "C1TIMEDOUT", "redirect_url": (
        "https://app.prolific.com/submissions/complete?cc=C1TIMEDOUT"), "incomplete": True}
    assert browser.get("/api/tasks/T1").get_json()["task"]["completion"]["completion_code"] == "C1TIMEDOUT"
    sheet = list(csv.DictReader(io.StringIO(admin_client.get("/api/admin/payments.csv").get_data(as_text=True))))
    assert (sheet[0]["total"], sheet[0]["incomplete_tasks"]) == ("0.00", "T1")
    assert admin_client.get("/api/admin/payments.csv?upload=1").get_data(as_text=True) == ""


def test_a_first_task_left_open_past_the_maximum_time_gets_no_code(app, clock, study):
    browser = _browser(app)
    assert _enter(browser).status_code == 201
    assert browser.post("/api/tasks/T1/start").status_code == 201
    clock.advance(study.timing.max_wall_seconds + 1)
    assert _questionnaire(browser, "T1").status_code == 201
    completion = browser.get("/api/tasks/T1").get_json()["task"]["completion"]
    assert completion["incomplete"] is True and completion["completion_code"] != "C1DONE"
    with _runtime(app).db.Session() as session:
        ts = session.scalar(select(TaskSession))
        assert (ts.end_reason, ts.outcome) == ("abandoned", "incomplete")


def test_an_engaged_task_is_complete_and_pay_incomplete_pays_the_rest(app, admin_client, clock, study):
    browser = _browser(app)
    assert _enter(browser).status_code == 201
    assert walk_task(browser, clock, "T1", THREE, study=study)["completion"]["completion_code"] == "C1DONE"
    clock.advance(days=3)
    assert walk_task(browser, clock, "T2", ["只有一条。"], study=study)["completion"]["incomplete"] is True
    sheet = admin_client.get("/api/admin/payments.csv").get_data(as_text=True)
    assert next(csv.DictReader(io.StringIO(sheet)))["total"] == "1.50"
    runtime = _runtime(app)
    runtime.settings.study = runtime.study.with_overrides({"payments": {"pay_incomplete": True}})
    sheet = admin_client.get("/api/admin/payments.csv").get_data(as_text=True)
    assert next(csv.DictReader(io.StringIO(sheet)))["total"] == "3.50"


# -- item 6: ids differing only in case --------------------------------------------------------------------


@pytest.mark.postgres
def test_panel_ids_are_case_insensitive_by_default(app):
    browser = _browser(app)
    assert _enter(browser, "AbCdEf123").status_code == 201
    again = _enter(browser, "abcdef123")
    assert again.status_code == 200 and again.get_json()["user"]["external_id"] == "AbCdEf123"
    other = _enter(_browser(app), "ABCDEF123")
    assert other.status_code == 403 and other.get_json()["error"] == "panel_reentry_refused"


def test_case_sensitive_ids_that_collide_get_a_message_saying_so(app):
    runtime = _runtime(app)
    runtime.settings.study = runtime.study.with_overrides({"panel": {"id_case_sensitive": True}})
    assert _enter(_browser(app), "AbCdEf123").status_code == 201
    clash = _enter(_browser(app), "abcdef123")
    assert clash.status_code == 409 and clash.get_json()["error"] == "panel_id_case_conflict"
    assert "upper/lower case" in clash.get_json()["message"]


# -- item 7: return links do not pile up -----------------------------------------------------------------


@pytest.mark.postgres
def test_revisiting_the_done_page_and_calendar_leaves_one_live_link_each(app, admin_client, clock, study):
    browser = _browser(app)
    assert _enter(browser).status_code == 201
    walk_task(browser, clock, "T1", THREE, study=study)
    urls = {browser.get("/api/me/return-link").get_json()["url"] for _ in range(50)}
    for _ in range(10):
        assert browser.get("/api/me/next-task.ics").status_code == 200
    assert len(urls) == 50
    user_id = browser.get("/api/auth/me").get_json()["user"]["id"]
    with _runtime(app).db.Session() as session:
        live = session.scalars(select(ReturnLink.purpose).where(ReturnLink.user_id == user_id,
                                                                ReturnLink.revoked_at.is_(None))).all()
    assert sorted(live) == ["calendar", "task_end"]
    earlier = sorted(urls)[0]
    record = admin_client.get(f"/api/admin/participants/{user_id}").get_json()
    assert (record["return_links"]["live"], record["return_links"]["issued"]) == (2, 60)
    reissued = admin_client.post(f"/api/admin/participants/{user_id}/return-link").get_json()
    assert (reissued["return_links"]["live"], reissued["return_links"]["issued"]) == (1, 61)
    record = admin_client.get(f"/api/admin/participants/{user_id}").get_json()
    assert record["return_links"]["live"] == 1
    assert _browser(app).get(earlier.split("localhost", 1)[1]).status_code == 404  # revoked


# -- issue 19 item 4: the entry cap is configured and returning visits are free ---------------------------


def test_the_panel_entry_cap_comes_from_configuration_and_returning_visits_do_not_count(
        settings, clock, database, monkeypatch):
    from app import create_app

    monkeypatch.setenv("RATE_LIMIT_PANEL_ENTRIES_PER_ADDRESS", "3 per minute")
    settings.rate_limits_enabled = True
    app = create_app(settings, clock=clock)
    try:
        returning = _browser(app)
        assert _enter(returning, "campus00").status_code == 201
        for _ in range(10):
            assert _enter(returning, "campus00").status_code == 200
        statuses = [_enter(_browser(app), f"campus{n:02d}").status_code for n in range(1, 4)]
        assert statuses == [201, 201, 429]
        assert _enter(returning, "campus00").status_code == 200
    finally:
        _runtime(app).db.dispose()
