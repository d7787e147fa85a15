"""Lab staff: one-time invitations, roles checked on the server for every admin route, disabling, password
resets and the TOTP second factor (issue 29, section 3)."""
from __future__ import annotations

import pyotp
import pytest
from sqlalchemy import select

from database.models import AuditLog, User
from tests.conftest import ApiClient
from tests.routes.test_admin_access import ADMIN_ROUTES, STAFF_ROUTES, _call

PASSWORD = "a-long-staff-passphrase-7"
# The issue's table, restated here on its own (not read from the code): what each role may reach.
MONITOR = {"/api/admin/participants", "/api/admin/failures", "/api/admin/usage", "/api/admin/preflight",
           "/api/admin/plots/funnel.png", "/api/admin/plots/group_sizes.png",
           "/api/admin/plots/questionnaire_means.png", "/api/admin/plots/recall_events.png"}
CONVERSATIONS = {"/api/admin/participants/{pid}", "/api/admin/plots/forgetting_curves.png"}


def allowed(role: str, method: str, path: str) -> bool:
    base = path.split("?")[0]
    if role == "owner":
        return True
    if base in MONITOR or base == "/api/admin/report":  # the report: aggregated figures, every role
        return True
    if role == "viewer":
        return False
    if base in CONVERSATIONS or base.endswith("/withdraw"):
        return True
    if role == "assistant":  # no identifiable export, no erasure, no consolidation, resets or links
        return base == "/api/admin/export" and "exclude_pii=1" in path
    return not base.endswith("/erase")  # a researcher: everything but erasure (and publishing, staff)


def _invite(admin_client, username: str, role: str) -> str:
    response = admin_client.post("/api/admin/staff", json={"username": username, "role": role})
    assert response.status_code == 201, response.get_json()
    url = response.get_json()["invite_url"]
    assert "/staff/accept/" in url
    return url.rstrip("/").rsplit("/", 1)[1]


@pytest.fixture
def member(app, admin_client):
    """member(role) -> a signed-in ApiClient of a new staff member with that role, invited by the owner."""
    made = {"n": 0}

    def factory(role: str) -> ApiClient:
        made["n"] += 1
        name = f"{role}{made['n']}"
        token = _invite(admin_client, name, role)
        api = ApiClient(app.test_client())
        accepted = api.post("/api/admin/staff/accept", json={"token": token, "password": PASSWORD})
        assert accepted.status_code == 200, accepted.get_json()
        assert api.login(name, PASSWORD).status_code == 200
        return api
    return factory


@pytest.mark.postgres
def test_an_invited_viewer_signs_in_at_the_usual_route_and_cannot_export(member):
    viewer = member("viewer")
    me = viewer.get("/api/admin/staff/me").get_json()
    assert me["role"] == "viewer" and me["permissions"] == ["monitor", "report"]
    refused = viewer.get("/api/admin/export")
    assert refused.status_code == 403
    assert refused.get_json()["error"] == "role_forbidden"
    assert viewer.get("/api/admin/export?exclude_pii=1").status_code == 403
    assert viewer.get("/api/admin/participants").status_code == 200
    assert viewer.get("/admin", headers={"Accept": "text/html"}).status_code == 200


@pytest.fixture
def people(make_participant):
    participant = make_participant("alice")
    return {"participant": participant, "pid": participant.get("/api/auth/me").get_json()["user"]["id"]}


@pytest.mark.parametrize("role", ["researcher", "assistant", "viewer"])
def test_every_admin_route_checks_the_role_on_the_server(member, make_participant, role):
    api = member(role)
    # An allowed action changes its participant's state, so each allowed route gets a fresh participant; a refused
    # one must change nothing, so the refused routes share one, which must come out of them untouched (a
    # registration hashes a password with scrypt: one per refused route was most of the viewer's case).
    untouched = make_participant()
    before = untouched.get("/api/auth/me").get_json()["user"]
    for method, path, body in ADMIN_ROUTES:
        may = allowed(role, method, path)
        participant = make_participant() if may or "/reset" in path else untouched
        pid = participant.get("/api/auth/me").get_json()["user"]["id"]
        if "/reset" in path:
            assert participant.post("/api/tasks/T1/start").status_code == 201
        response = _call(api, method, path.format(pid=pid), body)
        if may:
            assert response.status_code == 200, (path, response.get_data(as_text=True)[:300])
        else:
            assert response.status_code == 403, (path, response.get_data(as_text=True)[:300])
            assert response.get_json()["error"] == "role_forbidden"
    after = untouched.get("/api/auth/me")  # still signed in, not withdrawn, erased or moved on
    assert after.status_code == 200 and after.get_json()["user"] == before


def test_staff_routes_refuse_anonymous_callers_and_participants(make_participant, client, admin_client):
    participant = make_participant("carol")
    sid = admin_client.get("/api/admin/staff/me").get_json()  # the owner's own id is not needed: any id
    assert sid["role"] == "owner"
    for method, path, body in STAFF_ROUTES:
        path = path.format(sid=1)
        assert _call(client, method, path, body).status_code == 401, path
        response = _call(participant, method, path, body)
        assert response.status_code == 403, path


def test_every_admin_api_route_names_a_permission(app):
    open_to_every_member = {"staff.me", "staff.totp_setup", "staff.totp_confirm", "staff.accept"}
    for rule in app.url_map.iter_rules():
        if not (rule.rule.startswith("/api/admin") or rule.rule.startswith("/admin")):
            continue
        if rule.endpoint in open_to_every_member or rule.rule == "/admin/login":
            continue
        view = app.view_functions[rule.endpoint]
        assert getattr(view, "permission", None), f"{rule.rule} ({rule.endpoint}) checks no role"


@pytest.mark.postgres
def test_an_invitation_works_once_and_only_its_hash_is_stored(app, admin_client, client):
    token = _invite(admin_client, "once", "assistant")
    runtime = app.extensions["memory_lab"]
    with runtime.db.Session() as session:
        from database.models import StaffToken

        stored = session.scalars(select(StaffToken.token_hash)).all()
    assert token not in stored and len(stored) == 1
    assert client.post("/api/admin/staff/accept", json={"token": token, "password": PASSWORD}).status_code == 200
    again = client.post("/api/admin/staff/accept", json={"token": token, "password": PASSWORD})
    assert again.status_code == 404 and again.get_json()["error"] == "token_invalid"


def test_an_invitation_expires(app, admin_client, client, clock):
    token = _invite(admin_client, "late", "viewer")
    clock.advance(days=8)
    assert client.post("/api/admin/staff/accept", json={"token": token, "password": PASSWORD}).status_code == 404


def test_accepting_needs_a_strong_password_and_the_csrf_token(admin_client, client):
    token = _invite(admin_client, "weakling", "viewer")
    weak = client.post("/api/admin/staff/accept", json={"token": token, "password": "password"})
    assert weak.status_code == 400
    assert client.raw.post("/api/admin/staff/accept", json={"token": token, "password": PASSWORD}).status_code == 400
    assert client.post("/api/admin/staff/accept", json={"token": token, "password": PASSWORD}).status_code == 200


def test_only_an_owner_manages_staff(member):
    researcher = member("researcher")
    refused = researcher.post("/api/admin/staff", json={"username": "sneaky", "role": "owner"})
    assert refused.status_code == 403 and refused.get_json()["error"] == "role_forbidden"
    assert researcher.get("/api/admin/staff").status_code == 403


def test_bad_roles_and_taken_names_are_refused(admin_client, make_participant):
    make_participant("takenname")
    assert admin_client.post("/api/admin/staff", json={"username": "x1x", "role": "god"}).status_code == 400
    assert admin_client.post("/api/admin/staff", json={"username": "takenname", "role": "viewer"}).status_code == 409


@pytest.mark.postgres
def test_disabling_ends_the_members_sessions_and_refuses_the_next_sign_in(app, admin_client, member):
    assistant = member("assistant")
    user_id = next(m["id"] for m in admin_client.get("/api/admin/staff").get_json()["staff"]
                   if m["role"] == "assistant")
    assert admin_client.post(f"/api/admin/staff/{user_id}/disable").status_code == 200
    assert assistant.get("/api/admin/participants").status_code == 401
    refused = ApiClient(app.test_client()).login("assistant1", PASSWORD)
    assert refused.status_code == 403 and refused.get_json()["error"] == "staff_disabled"
    assert admin_client.post(f"/api/admin/staff/{user_id}/enable").status_code == 200
    assert ApiClient(app.test_client()).login("assistant1", PASSWORD).status_code == 200


def test_the_last_owner_cannot_be_disabled_or_demoted(admin_client):
    me = next(m for m in admin_client.get("/api/admin/staff").get_json()["staff"] if m["username"] == "labadmin")
    assert admin_client.post(f"/api/admin/staff/{me['id']}/disable").get_json()["error"] == "last_owner"
    demoted = admin_client.post(f"/api/admin/staff/{me['id']}/role", json={"role": "viewer"})
    assert demoted.status_code == 409 and demoted.get_json()["error"] == "last_owner"


def test_a_reset_link_sets_a_new_password_and_ends_old_sessions(app, admin_client, member):
    viewer = member("viewer")
    user_id = next(m["id"] for m in admin_client.get("/api/admin/staff").get_json()["staff"] if m["role"] == "viewer")
    url = admin_client.post(f"/api/admin/staff/{user_id}/reset-link").get_json()["reset_url"]
    token = url.rsplit("/", 1)[1]
    fresh = ApiClient(app.test_client())
    accepted = fresh.post("/api/admin/staff/accept", json={"token": token, "password": "another-long-phrase-42"})
    assert accepted.status_code == 200
    assert viewer.get("/api/admin/participants").status_code == 401
    assert fresh.login("viewer1", PASSWORD).status_code == 401
    assert fresh.login("viewer1", "another-long-phrase-42").status_code == 200


def test_a_role_change_takes_effect_at_the_next_sign_in(app, admin_client, member):
    researcher = member("researcher")
    user_id = next(m["id"] for m in admin_client.get("/api/admin/staff").get_json()["staff"]
                   if m["role"] == "researcher")
    assert admin_client.post(f"/api/admin/staff/{user_id}/role", json={"role": "viewer"}).status_code == 200
    assert researcher.get("/api/admin/export").status_code == 401
    again = ApiClient(app.test_client())
    assert again.login("researcher1", PASSWORD).status_code == 200
    assert again.get("/api/admin/export").status_code == 403


def test_totp_second_factor(app, member, clock):
    researcher = member("researcher")
    secret = researcher.post("/api/admin/staff/totp/setup").get_json()["secret"]
    assert researcher.post("/api/admin/staff/totp/confirm", json={"code": "000000"}).status_code == 400
    now = app.extensions["memory_lab"].clock.now().timestamp()
    code = pyotp.TOTP(secret).at(int(now))
    assert researcher.post("/api/admin/staff/totp/confirm", json={"code": code}).status_code == 200
    fresh = ApiClient(app.test_client())
    missing = fresh.login("researcher1", PASSWORD)
    assert missing.status_code == 401 and missing.get_json()["error"] == "totp_required"
    wrong = fresh.post("/api/auth/login", json={"username": "researcher1", "password": PASSWORD, "totp": "123456"
                                                if code != "123456" else "654321"})
    assert wrong.status_code == 401 and wrong.get_json()["error"] == "totp_invalid"
    right = fresh.post("/api/auth/login", json={"username": "researcher1", "password": PASSWORD,
                                                "totp": pyotp.TOTP(secret).at(int(now))})
    assert right.status_code == 200


@pytest.mark.postgres
def test_the_audit_log_names_the_member_for_each_action(app, admin_client, member, people):
    assistant = member("assistant")
    assert assistant.post(f"/api/admin/participants/{people['pid']}/withdraw",
                          json={"reason": "asked to stop"}).status_code == 200
    runtime = app.extensions["memory_lab"]
    with runtime.db.Session() as session:
        actor = session.scalar(select(User).where(User.username == "assistant1"))
        rows = session.scalars(select(AuditLog).where(AuditLog.target_user_id == people["pid"])).all()
        invited = session.scalars(select(AuditLog).where(AuditLog.action == "staff_invited")).all()
    assert any(r.actor_user_id == actor.id and "withdr" in r.action for r in rows), [r.action for r in rows]
    assert invited and all(r.details["actor"] == "labadmin" for r in invited)
