from sqlalchemy import func, select

from database.models import User
from tests.conftest import ApiClient


def count_users(app) -> int:
    with app.extensions["memory_lab"].db.Session() as session:
        return session.scalar(select(func.count(User.id)))


def test_register_requires_consent_and_stores_consent_time(app, client, clock):
    response = client.post("/api/auth/register", json={"username": "amy01", "password": "long-password"})
    assert response.status_code == 400
    assert response.get_json()["error"] == "consent_required"
    assert count_users(app) == 0
    response = client.register("amy01")
    assert response.status_code == 201
    body = response.get_json()
    assert body["user"]["role"] == "participant"
    with app.extensions["memory_lab"].db.Session() as session:
        user = session.scalar(select(User).where(User.username == "amy01"))
        assert user.consent_at == clock.now()
        assert user.consent_version == "2026-1"


def test_passwords_are_salted_hashes(app, make_participant):
    make_participant("bob01", password="same-password")
    make_participant("bob02", password="same-password")
    with app.extensions["memory_lab"].db.Session() as session:
        hashes = session.scalars(select(User.password_hash).order_by(User.id)).all()
    assert hashes[0] != hashes[1]
    assert all("same-password" not in h and h.startswith("scrypt:") for h in hashes)


def test_duplicate_username_is_409_and_changes_nothing(app, client, make_participant):
    make_participant("carol")
    assert count_users(app) == 1
    response = client.register("Carol")
    assert response.status_code == 409
    assert response.get_json()["error"] == "username_taken"
    assert count_users(app) == 1


def test_bad_usernames_and_short_passwords_are_400(client, app):
    assert client.register("a b c").status_code == 400
    assert client.register("ok_name", password="short").status_code == 400
    assert client.post("/api/auth/register", data="not json",
                       headers={"Content-Type": "application/json"}).status_code == 400
    assert count_users(app) == 0


def test_login_logout_and_wrong_password(app, make_participant):
    make_participant("dave01", password="right-password")
    api = ApiClient(app.test_client())
    wrong = api.login("dave01", "wrong-password")
    assert wrong.status_code == 401
    assert api.get("/api/tasks").status_code == 401
    assert api.login("nobody", "whatever-password").status_code == 401
    assert api.login("dave01", "right-password").status_code == 200
    assert api.get("/api/tasks").status_code == 200
    assert api.get("/api/auth/me").get_json()["user"]["username"] == "dave01"
    assert api.post("/api/auth/logout").status_code == 200
    assert api.get("/api/tasks").status_code == 401


def test_state_changing_requests_without_csrf_token_are_refused(app, make_participant):
    api = make_participant("erin01")
    raw = api.raw
    response = raw.post("/api/tasks/T1/start")
    assert response.status_code == 400
    assert response.get_json()["error"] == "csrf_failed"
    response = raw.post("/api/tasks/T1/start", headers={"X-CSRFToken": "forged"})
    assert response.status_code == 400
    assert api.get("/api/tasks").get_json()["tasks"][0]["status"] == "available"  # nothing started
    anonymous = app.test_client()
    response = anonymous.post("/api/auth/register",
                              json={"username": "mallory", "password": "password-123", "consent": True})
    assert response.status_code == 400
    assert count_users(app) == 1


def test_participant_never_sees_their_group(app, make_participant, clock):
    api = make_participant("frank01")
    bodies = [api.get(p).get_data(as_text=True) for p in ("/api/auth/me", "/api/tasks", "/api/tasks/T1", "/",
                                                         "/api/study")]
    api.post("/api/tasks/T1/start")
    clock.advance(5)
    bodies.append(api.post("/api/tasks/T1/messages", json={"content": "你好"}).get_data(as_text=True))
    for body in bodies:
        assert "memory_group" not in body
        for group in ("L1", "L2", "L3", "L4", "S1", "R1"):
            assert f'"{group}"' not in body


def test_login_guessing_is_rate_limited(settings, clock, database):
    from app import create_app

    settings.rate_limits_enabled = True
    app = create_app(settings, clock=clock)
    api = ApiClient(app.test_client())
    api.register("gina01", password="right-password")
    api.post("/api/auth/logout")
    statuses = [api.login("gina01", f"guess-{i}").status_code for i in range(12)]
    assert statuses[:10] == [401] * 10
    assert statuses[10:] == [429, 429]
    assert api.login("gina01", "right-password").status_code == 429  # locked out for the window
    app.extensions["memory_lab"].db.dispose()
