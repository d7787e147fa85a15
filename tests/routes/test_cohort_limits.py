"""A class behind one address: a whole cohort registers at once without 429s, while failed
registrations and per-address caps set in the environment still stop abuse."""
from __future__ import annotations

import pytest

from config import rate_limits_from_env
from tests.conftest import ApiClient


@pytest.fixture
def limited_app(settings, clock, database, monkeypatch):
    from app import create_app

    def build(**env: str):
        settings.rate_limits = rate_limits_from_env(env)
        settings.rate_limits_enabled = True
        return create_app(settings, clock=clock)

    built = []
    yield lambda **env: built.append(build(**env)) or built[-1]
    for app in built:
        app.extensions["memory_lab"].db.dispose()


def _register(app, name: str, address: str, **extra):
    api = ApiClient(app.test_client())
    api.raw.environ_base["REMOTE_ADDR"] = address
    return api.register(name, **extra)


def test_two_hundred_participants_from_one_address_all_get_in(limited_app, monkeypatch):
    from functools import partial

    from werkzeug.security import generate_password_hash

    from services.participants import account_service

    # What is tested is the limiter; 200 scrypt hashes would take over a minute of CPU here.
    monkeypatch.setattr(account_service, "generate_password_hash",
                        partial(generate_password_hash, method="pbkdf2:sha256:1000"))
    app = limited_app()
    statuses = [_register(app, f"class{i:03d}", "203.0.113.7").status_code for i in range(200)]
    assert statuses == [201] * 200


def test_failed_registrations_are_capped_per_address_without_blocking_others(limited_app):
    app = limited_app(RATE_LIMIT_REGISTER_FAILURES_PER_ADDRESS="5 per minute")
    first = _register(app, "taken01", "198.51.100.1")
    assert first.status_code == 201
    refused = [_register(app, "taken01", "198.51.100.1").status_code for _ in range(6)]
    assert refused == [409] * 5 + [429]
    # another address (another class) is not affected
    assert _register(app, "fresh01", "198.51.100.2").status_code == 201


def test_per_address_cap_comes_from_the_environment(limited_app):
    app = limited_app(RATE_LIMIT_REGISTER_PER_ADDRESS="3 per hour")
    statuses = [_register(app, f"capped{i}", "192.0.2.9").status_code for i in range(4)]
    assert statuses == [201, 201, 201, 429]


def test_refused_registrations_do_not_use_up_the_per_address_quota(limited_app):
    # a load balancer's 503 or a taken name, sent again, must not lock the rest of the class out
    app = limited_app(RATE_LIMIT_REGISTER_PER_ADDRESS="2 per hour")
    assert _register(app, "quota01", "192.0.2.10").status_code == 201
    assert [_register(app, "quota01", "192.0.2.10").status_code for _ in range(3)] == [409] * 3
    assert _register(app, "quota02", "192.0.2.10").status_code == 201
    assert _register(app, "quota03", "192.0.2.10").status_code == 429


def test_messages_are_limited_per_account_not_per_address(limited_app, clock):
    app = limited_app(RATE_LIMIT_MESSAGES_PER_ACCOUNT="3 per minute")
    alice = _register_logged_in(app, "alice01")
    bob = _register_logged_in(app, "bob01")
    for api in (alice, bob):
        assert api.post("/api/tasks/T1/start").status_code == 201
    sent = []
    for n in range(4):
        clock.advance(2)
        sent.append(alice.post("/api/tasks/T1/messages", json={"content": f"消息 {n}"}).status_code)
    assert sent == [201, 201, 201, 429]
    assert bob.post("/api/tasks/T1/messages", json={"content": "你好"}).status_code == 201


def _register_logged_in(app, name: str) -> ApiClient:
    api = ApiClient(app.test_client())
    api.raw.environ_base["REMOTE_ADDR"] = "203.0.113.50"
    assert api.register(name).status_code == 201
    return api


def test_a_malformed_limit_stops_start_up_with_its_name():
    with pytest.raises(ValueError, match="RATE_LIMIT_REGISTER_PER_ADDRESS"):
        rate_limits_from_env({"RATE_LIMIT_REGISTER_PER_ADDRESS": "lots"})
    assert rate_limits_from_env({})["register"] == "1000 per hour"
