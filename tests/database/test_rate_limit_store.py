"""Rate-limit counters in the database: one fixed window per key, shared by every process on the
database (two stores stand for two processes), atomic under concurrent requests, on SQLite and
PostgreSQL; and `RATE_LIMIT_STORAGE=database` puts the app's limits there."""
from __future__ import annotations

import threading

import pytest
from limits import parse
from limits.strategies import FixedWindowRateLimiter
from sqlalchemy import func, select

from database.db_manager import Database
from database.models import RateLimitCounter
from database.rate_limit_store import MAX_KEY, DatabaseRateLimitStorage, login_subject, stored_key
from tests.conftest import ApiClient

pytestmark = pytest.mark.postgres


@pytest.fixture
def stores(database, database_url):
    other_process = Database(database_url)
    yield DatabaseRateLimitStorage(engine=database.engine), DatabaseRateLimitStorage(engine=other_process.engine)
    other_process.dispose()


def test_a_window_counts_across_processes_and_starts_again_when_it_ends(stores, monkeypatch):
    import database.rate_limit_store as store_module

    a, b = stores
    now = [1_000_000.0]
    monkeypatch.setattr(store_module.time, "time", lambda: now[0])
    assert a.incr("login:ann", 60) == 1
    assert b.incr("login:ann", 60) == 2  # the other process adds to the same window
    assert a.incr("login:ann", 60, amount=3) == 5
    assert b.get("login:ann") == 5 and a.get_expiry("login:ann") == pytest.approx(1_000_060.0)
    assert a.get("login:bob") == 0
    now[0] += 61  # the window has ended: the count starts again with a new expiry
    assert a.get("login:ann") == 0
    assert b.incr("login:ann", 60) == 1 and a.get_expiry("login:ann") == pytest.approx(1_000_121.0)
    a.clear("login:ann")
    assert b.get("login:ann") == 0
    a.incr("x", 60)
    assert b.reset() == 1 and a.get("x") == 0 and a.check()


def test_a_limit_holds_across_processes(stores):
    a, b = stores
    limit = parse("3 per minute")
    first, second = FixedWindowRateLimiter(a), FixedWindowRateLimiter(b)
    assert [first.hit(limit, "register", "198.51.100.1") for _ in range(2)] == [True, True]
    assert second.hit(limit, "register", "198.51.100.1") is True
    assert second.hit(limit, "register", "198.51.100.1") is False  # three were used, whichever process took them
    assert first.hit(limit, "register", "198.51.100.1") is False
    assert first.hit(limit, "register", "198.51.100.2") is True  # another address has its own window


def test_concurrent_hits_are_all_counted(stores):
    a, b = stores
    barrier = threading.Barrier(8)

    def hit(store):
        barrier.wait()
        for _ in range(10):
            store.incr("messages:1", 60)

    threads = [threading.Thread(target=hit, args=(s,)) for s in (a, b) * 4]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert a.get("messages:1") == 80


def test_long_keys_are_stored_by_digest(stores):
    a, _ = stores
    key = "login:" + "名" * 400
    assert len(stored_key(key)) <= MAX_KEY and stored_key(key) != stored_key(key + "x")
    assert a.incr(key, 60) == 1 and a.incr(key, 60) == 2


def test_the_app_counts_its_limits_in_the_database(settings, clock, database):
    from app import create_app

    settings.rate_limits_enabled = True
    settings.rate_limit_storage = "database"
    app = create_app(settings, clock=clock)
    try:
        api = ApiClient(app.test_client())
        statuses = [api.post("/api/auth/login", json={"username": "nobody", "password": "wrong-password"}).status_code
                    for _ in range(11)]
        assert statuses[-1] == 429 and 429 not in statuses[:10]
        with database.Session() as session:
            assert session.scalar(select(func.count()).select_from(RateLimitCounter)) >= 1
    finally:
        app.extensions["memory_lab"].db.dispose()


def test_keys_holding_text_the_database_cannot_store_are_stored_by_digest(stores):
    """Issue 19, item 11: a NUL or an unpaired surrogate in a key (an account name) is counted, not a 500."""
    a, b = stores
    for key in ["login:a\x00b", "login:\ud800x", "login:line\nbreak"]:
        assert stored_key(key).startswith("sha256:")
        assert a.incr(key, 60) == 1 and b.incr(key, 60) == 2 and a.get(key) == 2
    assert stored_key("login:a\x00b") != stored_key("login:a\x00c")
    assert stored_key("login:名字") == "login:名字"  # printable text is kept as it is


def test_ended_windows_are_deleted_as_the_store_writes(stores, database, monkeypatch):
    """Issue 19, item 12: rows whose window ended do not stay in the table for ever."""
    import database.rate_limit_store as store_module

    a, b = stores
    now = [1_000_000.0]
    monkeypatch.setattr(store_module.time, "time", lambda: now[0])
    a.incr("ended", 60)
    a.incr("running", 600)
    now[0] += 120
    b.incr("new", 60)  # this store's first write sweeps; later ones at most once per SWEEP_SECONDS
    with database.Session() as session:
        assert set(session.scalars(select(RateLimitCounter.key))) == {"running", "new"}
    a.incr("ended-too", 1)
    now[0] += 2
    a.incr("new", 60)  # within a's sweep interval: nothing is deleted yet
    with database.Session() as session:
        assert set(session.scalars(select(RateLimitCounter.key))) == {"running", "new", "ended-too"}
    now[0] += store_module.SWEEP_SECONDS
    a.incr("new", 60)
    with database.Session() as session:
        assert set(session.scalars(select(RateLimitCounter.key))) == {"running", "new"}


@pytest.mark.parametrize("name", ["nul\x00name", "lone\ud800surrogate"])
def test_a_login_name_the_database_cannot_store_is_refused_before_it_is_counted(settings, clock, database, name):
    """Issue 19, item 11: on the database store (`make serve`) such a name was a 500; it is a clear 400, and
    nothing is counted for it."""
    import json

    from app import create_app

    settings.rate_limits_enabled = True
    settings.rate_limit_storage = "database"
    app = create_app(settings, clock=clock)
    try:
        api = ApiClient(app.test_client())
        body = json.dumps({"username": name, "password": "wrong-password"})  # \u0000 / \ud800 escapes
        response = api.post("/api/auth/login", data=body, content_type="application/json")
        assert response.status_code == 400, response.get_data(as_text=True)
        assert response.get_json()["error"] == "invalid_text"
        assert response.get_json()["details"]["field"] == "body.username"
        with database.Session() as session:
            assert session.scalar(select(func.count()).select_from(RateLimitCounter)) == 0
        # a storable name is counted under a digest of the name, never the name itself
        assert api.post("/api/auth/login", json={"username": "Visible.Name", "password": "x"}).status_code == 401
        with database.Session() as session:
            keys = list(session.scalars(select(RateLimitCounter.key)))
        assert any(login_subject("visible.name") in key for key in keys)
        assert not any("visible" in key.lower() for key in keys)
    finally:
        app.extensions["memory_lab"].db.dispose()


def test_within_a_request_the_headers_come_from_the_increment_without_a_read(stores):
    from flask import Flask
    from sqlalchemy import event

    a, b = stores
    statements: list[str] = []
    listener = lambda *args: statements.append(args[2])  # noqa: E731
    event.listen(a.engine, "before_cursor_execute", listener)
    try:
        with Flask(__name__).test_request_context("/"):
            assert a.incr("user:7/messages", 60) == 1
            counted = len(statements)
            assert a.get("user:7/messages") == 1 and a.get_expiry("user:7/messages") > 0
            assert len(statements) == counted  # the response's headers: no second or third round trip
            assert b.incr("user:7/messages", 60) == 2  # another process (or request) counts on
        with Flask(__name__).test_request_context("/"):  # the next request reads the database again
            assert a.get("user:7/messages") == 2
    finally:
        event.remove(a.engine, "before_cursor_execute", listener)
    assert a.get("user:7/messages") == 2  # outside any request: read from the database
