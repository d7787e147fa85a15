"""Issue 11, items 3, 4, 6, 7, 8 and 9: sessions end at logout and password change, login limits that
padding cannot dodge, 4xx instead of 500s for odd input, a busy or read-only database, headers, passwords."""
from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pytest
from sqlalchemy import event, func, select

from database.models import Message, User
from tests.conftest import ADMIN_PASSWORD, ApiClient

STATIC = Path(__file__).resolve().parents[2] / "static"
DEEP = "[" * 100_000 + "]" * 100_000


def clone(app, api: ApiClient) -> ApiClient:
    copy = ApiClient(app.test_client())
    copy.raw.set_cookie("session", api.raw.get_cookie("session").value)
    return copy


def user_id(app, username: str) -> int:
    with app.extensions["memory_lab"].db.Session() as session:
        return session.scalar(select(User.id).where(User.username == username))


# -- 3. sessions -----------------------------------------------------------------------------------------


def test_a_cookie_copied_before_logout_stops_working(app, make_participant):
    api = make_participant("copycat", password="copy-cat-pass-1")
    stolen = clone(app, api)
    assert stolen.get("/api/auth/me").status_code == 200
    assert api.post("/api/auth/logout").status_code == 200
    assert stolen.get("/api/auth/me").status_code == 401
    assert stolen.get("/api/tasks").status_code == 401
    again = ApiClient(app.test_client())
    assert again.login("copycat", "copy-cat-pass-1").status_code == 200
    assert again.get("/api/tasks").status_code == 200


def test_an_admin_password_reset_ends_the_admins_existing_sessions(app, admin_client, monkeypatch):
    assert admin_client.get("/api/admin/participants").status_code == 200
    monkeypatch.setenv("ADMIN_PASSWORD", "brand-new-admin-pass-7")
    result = app.test_cli_runner().invoke(args=["create-admin", "labadmin"])
    assert result.exit_code == 0, result.output
    assert admin_client.get("/api/admin/participants").status_code == 401
    fresh = ApiClient(app.test_client())
    assert fresh.login("labadmin", ADMIN_PASSWORD).status_code == 401
    assert fresh.login("labadmin", "brand-new-admin-pass-7").status_code == 200
    assert fresh.get("/api/admin/participants").status_code == 200


def test_a_forged_or_malformed_login_cookie_is_just_logged_out(app, make_participant):
    from flask.sessions import SecureCookieSessionInterface

    make_participant("victim01")
    serializer = SecureCookieSessionInterface().get_signing_serializer(app)
    for forged_id in ("1", "1.x", "99999999999999999999999.0", "².0", ""):
        client = ApiClient(app.test_client())
        client.raw.set_cookie("session", serializer.dumps({"_user_id": forged_id, "_fresh": True}))
        assert client.get("/api/auth/me").status_code == 401


# -- 4. login limits -----------------------------------------------------------------------------------


@pytest.fixture
def limited_app(settings, clock, database):
    from app import create_app

    settings.rate_limits_enabled = True
    app = create_app(settings, clock=clock)
    yield app
    app.extensions["memory_lab"].db.dispose()


def test_padded_and_case_variants_share_the_login_limit(limited_app):
    api = ApiClient(limited_app.test_client())
    api.register("victim", password="victims-real-pass-1")
    api.post("/api/auth/logout")
    assert [api.login("victim", f"guess-{i}").status_code for i in range(10)] == [401] * 10
    for variant in ("  victim", "victim\n", "VICTIM", "ｖｉｃｔｉｍ"):
        assert api.login(variant, "victims-real-pass-1").status_code == 429, variant


def test_many_usernames_from_one_address_are_limited_but_successes_are_not(limited_app):
    api = ApiClient(limited_app.test_client())
    statuses = [api.login(f"nobody{i:02d}", "some-guess-pass").status_code for i in range(40)]
    assert statuses[:30] == [401] * 30
    assert set(statuses[30:]) == {429}


def test_a_class_behind_one_address_can_log_in(limited_app):
    """Successful logins do not count against the address: 40 participants behind one NAT log in."""
    for i in range(40):
        api = ApiClient(limited_app.test_client())
        assert api.register(f"pupil{i:02d}", password="class-room-pass-1").status_code == 201
        api.post("/api/auth/logout")
        assert api.login(f"pupil{i:02d}", "class-room-pass-1").status_code == 200


# -- 6. 4xx, never 500 ---------------------------------------------------------------------------------


def test_huge_ids_in_paths_are_404(app, make_participant, admin_client):
    api = make_participant("idler")
    api.post("/api/tasks/T1/start")
    big = "9" * 23
    assert api.post(f"/api/tasks/T1/messages/{big}/reply").status_code == 404
    assert admin_client.get(f"/api/admin/participants/{big}").status_code == 404
    assert admin_client.post(f"/api/admin/participants/{big}/withdraw", json={}).status_code == 404
    assert admin_client.post(f"/api/admin/participants/{big}/consolidate").status_code == 404
    assert admin_client.post(f"/api/admin/participants/{big}/tasks/T1/reset", json={"reason": "x"}).status_code == 404
    assert admin_client.get(f"/api/admin/participants/{2**31}").status_code == 404


@pytest.mark.parametrize("raw", ["²", "9" * 30, "-1", "0", "1.5", " 1", "١"])
def test_odd_numbers_in_query_parameters_are_400(admin_client, raw):
    response = admin_client.get("/api/admin/plots/forgetting_curves.png", query_string={"user_id": raw})
    assert response.status_code == 400, response.get_data(as_text=True)
    response = admin_client.get("/api/admin/failures", query_string={"limit": raw})
    assert response.status_code == 400 and response.get_json()["error"] == "invalid_limit"


def test_a_deeply_nested_json_body_is_400(app, make_participant, admin_client):
    api = make_participant("nester")
    api.post("/api/tasks/T1/start")
    headers = {"Content-Type": "application/json"}
    for client, path in ((api, "/api/tasks/T1/messages"), (api, "/api/auth/language"),
                         (ApiClient(app.test_client()), "/api/auth/login"),
                         (ApiClient(app.test_client()), "/api/auth/register"),
                         (admin_client, f"/api/admin/participants/{user_id(app, 'nester')}/withdraw")):
        response = client.post(path, data=DEEP, headers=headers)
        assert response.status_code == 400, (path, response.status_code)
        assert response.get_json()["error"] == "invalid_json"


# -- 7. a locked or read-only database ----------------------------------------------------------------


def _a_message_while_another_connection_holds_a_lock(settings, clock, username, busy_timeout, hold_lock):
    """Post a message while ``hold_lock()``'s connection holds a lock longer than the busy timeout: the
    answer is a retryable 503 that says nothing was saved, nothing is stored, and a resend succeeds."""
    from app import create_app

    settings.db_busy_timeout_seconds = busy_timeout
    app = create_app(settings, clock=clock)
    api = ApiClient(app.test_client())
    api.register(username)
    api.post("/api/tasks/T1/start")
    clock.advance(5)
    holder = hold_lock()
    try:
        response = api.post("/api/tasks/T1/messages", json={"content": "do not lose me"})
    finally:
        holder.rollback()
        holder.close()
    assert response.status_code == 503
    body = response.get_json()
    assert body["error"] == "database_busy" and body["retryable"] is True and "NOT saved" in body["message"]
    assert response.headers["Retry-After"]
    with app.extensions["memory_lab"].db.Session() as session:
        assert session.scalar(select(func.count(Message.id))) == 0
    assert api.post("/api/tasks/T1/messages", json={"content": "do not lose me"}).status_code == 201
    app.extensions["memory_lab"].db.dispose()


def test_a_locked_sqlite_database_answers_503_not_saved(settings, clock, database, database_url):
    if not database_url.startswith("sqlite"):
        pytest.skip("SQLite's write lock; the PostgreSQL lock is tested below")
    import sqlite3

    def hold_lock():
        holder = sqlite3.connect(database_url.removeprefix("sqlite:///"), timeout=1)
        holder.execute("BEGIN IMMEDIATE")  # another writer holds the lock for longer than the busy timeout
        return holder

    _a_message_while_another_connection_holds_a_lock(settings, clock, "locked01", 0.2, hold_lock)


@pytest.mark.postgres
def test_a_locked_postgresql_table_answers_503_not_saved(settings, clock, database, database_url):
    if not database_url.startswith("postgresql"):
        pytest.skip("PostgreSQL's lock_timeout; the SQLite lock is tested above")
    import psycopg

    def hold_lock():
        holder = psycopg.connect(database_url.replace("postgresql+psycopg://", "postgresql://"))
        holder.execute("LOCK TABLE messages IN ACCESS EXCLUSIVE MODE")  # held past the timeout, not forever
        return holder

    _a_message_while_another_connection_holds_a_lock(settings, clock, "pglocked01", 0.5, hold_lock)


@pytest.mark.postgres
def test_a_read_only_database_answers_503_not_saved(app, make_participant, clock):
    api = make_participant("readonly01")
    api.post("/api/tasks/T1/start")
    clock.advance(5)
    engine = app.extensions["memory_lab"].db.engine
    statement = ("PRAGMA query_only=ON" if engine.dialect.name == "sqlite"
                 else "SET default_transaction_read_only = on")

    def read_only(dbapi_connection, _record):
        cursor = dbapi_connection.cursor()
        cursor.execute(statement)
        cursor.close()
        if engine.dialect.name != "sqlite":
            dbapi_connection.commit()

    event.listen(engine, "connect", read_only)
    engine.dispose()
    response = api.post("/api/tasks/T1/messages", json={"content": "keep me in the box"})
    assert response.status_code == 503, response.get_data(as_text=True)
    assert response.get_json()["error"] == "database_busy"
    event.remove(engine, "connect", read_only)
    engine.dispose()
    with app.extensions["memory_lab"].db.Session() as session:
        assert session.scalar(select(func.count(Message.id))) == 0


# -- 8. headers -------------------------------------------------------------------------------------------


def test_every_response_carries_the_security_headers(app, make_participant, admin_client):
    api = make_participant("header01")
    responses = [api.get("/"), api.get("/api/tasks"), api.get("/static/js/api.js"), api.get("/api/nothing"),
                 admin_client.get("/admin"), admin_client.get("/api/admin/participants")]
    for response in responses:
        csp = response.headers.get("Content-Security-Policy", "")
        script_src = re.search(r"script-src ([^;]*)", csp)
        assert script_src and "'unsafe-inline'" not in script_src.group(1) and "'unsafe-eval'" not in csp
        assert "frame-ancestors 'none'" in csp
        assert response.headers["X-Frame-Options"] == "DENY"
        assert response.headers["X-Content-Type-Options"] == "nosniff"
        assert response.headers["Referrer-Policy"] == "same-origin"


def test_admin_and_personal_api_answers_are_not_cached(app, make_participant, admin_client):
    api = make_participant("cache01")
    uid = user_id(app, "cache01")
    for response in (admin_client.get("/api/admin/participants"), admin_client.get(f"/api/admin/participants/{uid}"),
                     admin_client.get("/api/admin/failures"), api.get("/api/tasks"), api.get("/api/auth/me")):
        assert response.status_code == 200
        assert response.headers["Cache-Control"] == "no-store"


def test_the_pages_have_no_inline_script_for_the_policy_to_block():
    for page in STATIC.glob("*.html"):
        html = page.read_text(encoding="utf-8")
        assert not re.search(r"<script(?![^>]*\bsrc=)[^>]*>", html, re.IGNORECASE), page.name
        assert not re.search(r"\son[a-z]+\s*=", html, re.IGNORECASE), page.name
        assert "javascript:" not in html.lower(), page.name


# -- 9. passwords -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("password", ["12345678", "password", " " * 8, "qwertyuiop", "P@ssw0rd", "aaaaaaaaaaaa"])
def test_common_and_trivial_passwords_are_refused(app, client, password):
    response = client.register("careful01", password=password)
    assert response.status_code == 400
    assert response.get_json()["error"] == "weak_password"
    with app.extensions["memory_lab"].db.Session() as session:
        assert session.scalar(select(func.count(User.id))) == 0


def test_a_password_that_contains_the_username_is_refused(client):
    assert client.register("zhangwei1990", password="zhangwei1990").get_json()["error"] == "weak_password"


def test_very_long_passwords_are_refused_before_any_hash(app, client, make_participant, monkeypatch):
    from services.participants import account_service

    make_participant("longpass", password="normal-length-pass-1")
    hashed: list[int] = []
    real_hash, real_check = account_service.generate_password_hash, account_service.check_password_hash
    monkeypatch.setattr(account_service, "generate_password_hash",
                        lambda p, *a, **k: hashed.append(len(p)) or real_hash(p, *a, **k))
    monkeypatch.setattr(account_service, "check_password_hash",
                        lambda h, p: hashed.append(len(p)) or real_check(h, p))
    huge = "Zq9!" * 100_000  # 400 kB, under the request size limit
    response = client.register("longpass2", password=huge)
    assert response.status_code == 400 and response.get_json()["error"] == "password_too_long"
    assert ApiClient(app.test_client()).login("longpass", huge).status_code == 401
    assert hashed == []
    exactly_256 = hashlib.sha512(b"long").hexdigest() * 2
    assert client.register("longpass3", password=exactly_256).status_code == 201  # the cap itself is fine


def test_create_admin_refuses_a_weak_password(app, monkeypatch):
    monkeypatch.setenv("ADMIN_PASSWORD", "password")
    result = app.test_cli_runner().invoke(args=["create-admin", "weakadmin"])
    assert result.exit_code != 0
    with app.extensions["memory_lab"].db.Session() as session:
        assert session.scalar(select(User).where(User.username == "weakadmin")) is None
