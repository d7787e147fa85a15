"""Accounts against squatting and lock-out (issue 18 items 4 and 5): the erased- prefix is reserved and
erasure never fails because of a name; other people's wrong guesses never lock the owner out."""
from __future__ import annotations

import pytest
from sqlalchemy import select

from config import rate_limits_from_env
from database.models import User
from services.participants.account_service import hash_password
from tests.conftest import ADMIN_PASSWORD, ApiClient

OWNER = {"REMOTE_ADDR": "10.0.0.1"}


# -- item 4 -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["erased-P1234ABCD", "Erased-someone", "ＥＲＡＳＥＤ-x1"])
def test_the_erased_prefix_cannot_be_registered(client, name):
    response = ApiClient(client).register(name)
    assert response.status_code == 400 and response.get_json()["error"] == "reserved_username"
    assert "reserved" in response.get_json()["message"]


@pytest.mark.postgres
def test_erasure_succeeds_when_an_older_account_holds_the_erased_name(app, make_participant, admin_client):
    victim = make_participant("victim01")
    me = victim.get("/api/auth/me").get_json()["user"]
    runtime = app.extensions["memory_lab"]
    with runtime.db.Session() as session:  # squatted before the prefix was reserved
        squatter = session.scalar(select(User).where(User.username == make_participant("squat01").get(
            "/api/auth/me").get_json()["user"]["username"]))
        squatter.username = f"erased-{me['participant_code']}"
        squatter.password_hash = hash_password("squatter-password-1")
        session.commit()
    response = admin_client.post(f"/api/admin/participants/{me['id']}/erase",
                                 json={"confirm": True, "reason": "participant asked"})
    assert response.status_code == 200, response.get_json()
    with runtime.db.Session() as session:
        erased = session.get(User, me["id"])
        assert erased.status == "erased" and erased.username == f"erased:{me['participant_code']}"


# -- item 5 -----------------------------------------------------------------------------------------------


@pytest.fixture
def limited_app(settings, clock, database, monkeypatch):
    from app import create_app
    from services.participants.account_service import create_admin

    monkeypatch.setattr(settings, "rate_limits",
                        rate_limits_from_env({"RATE_LIMIT_LOGIN_FAILURES_PER_ACCOUNT": "20 per hour"}))
    settings.rate_limits_enabled = True
    app = create_app(settings, clock=clock)
    runtime = app.extensions["memory_lab"]
    with runtime.db.Session() as session:
        create_admin(session, "admin", ADMIN_PASSWORD, runtime.clock)
    yield app
    runtime.db.dispose()


def _login(app, password: str, address: str):
    """A login to ``admin`` from a fresh browser at ``address``."""
    return ApiClient(app.test_client()).post("/api/auth/login", json={"username": "admin", "password": password},
                                             environ_base={"REMOTE_ADDR": address})


def test_wrong_guesses_from_other_addresses_never_lock_the_owner_out(limited_app):
    assert _login(limited_app, "wrong-guess-0", "203.0.113.7").status_code == 401
    statuses = [_login(limited_app, f"wrong-guess-{n}", f"203.0.113.{n % 3 + 10}").status_code for n in range(12)]
    assert statuses == [401] * 12
    assert _login(limited_app, ADMIN_PASSWORD, OWNER["REMOTE_ADDR"]).status_code == 200


@pytest.mark.postgres
def test_past_the_per_account_ceiling_only_the_owners_known_address_gets_in(limited_app):
    assert _login(limited_app, ADMIN_PASSWORD, OWNER["REMOTE_ADDR"]).status_code == 200  # the owner's address
    for n in range(25):  # a botnet: many addresses, each under its own (name, address) limit
        _login(limited_app, f"wrong-guess-{n}", f"198.51.100.{n}")
    assert _login(limited_app, "another-guess", "198.51.100.200").status_code == 429
    assert _login(limited_app, ADMIN_PASSWORD, "198.51.100.201").status_code == 429  # an unknown address waits
    assert _login(limited_app, ADMIN_PASSWORD, OWNER["REMOTE_ADDR"]).status_code == 200


def test_one_address_guessing_one_account_is_still_limited(limited_app):
    statuses = [_login(limited_app, f"wrong-guess-{n}", "192.0.2.5").status_code for n in range(11)]
    assert statuses == [401] * 10 + [429]


def test_the_monitor_shows_repeated_failed_logins(limited_app):
    for n in range(4):
        _login(limited_app, f"wrong-guess-{n}", f"192.0.2.{n}")
    admin = ApiClient(limited_app.test_client())
    assert admin.post("/api/auth/login", json={"username": "admin", "password": ADMIN_PASSWORD},
                      environ_base=OWNER).status_code == 200
    failures = admin.get("/api/admin/participants").get_json()["integrity"]["login_failures"]
    assert [(f["username"], f["failures"], f["addresses"]) for f in failures] == [("admin", 4, 4)]
