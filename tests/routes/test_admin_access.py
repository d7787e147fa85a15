"""Every admin route refuses anonymous callers (401) and participants (403), and answers admins."""
from __future__ import annotations

import shutil
from datetime import datetime

import pytest
import sqlalchemy as sa

from config import Settings
from services.platform.clock import ManualClock
from tests.conftest import ADMIN_PASSWORD, ApiClient, walk_task
from tests.routes.test_study_design_access import STUDY_DESIGN_PATHS

# (method, path, body); {pid} is a participant's id, {other} another participant's
ADMIN_ROUTES = [
    ("GET", "/api/admin/participants", None),
    ("GET", "/api/admin/participants?group=L1&status=active&overdue=0", None),
    ("GET", "/api/admin/participants/{pid}", None),
    ("POST", "/api/admin/participants/{pid}/consolidate", {}),
    ("POST", "/api/admin/consolidate-pending", {}),
    ("POST", "/api/admin/participants/{pid}/withdraw", {"reason": "asked to stop"}),
    ("POST", "/api/admin/participants/{pid}/tasks/T1/reset", {"reason": "stuck"}),
    ("GET", "/api/admin/failures", None),
    ("GET", "/api/admin/usage", None),
    ("GET", "/api/admin/export", None),
    ("GET", "/api/admin/export?bom=1&exclude_pii=1", None),
    ("GET", "/api/admin/plots/funnel.png", None),
    ("GET", "/api/admin/plots/group_sizes.png", None),
    ("GET", "/api/admin/plots/questionnaire_means.png", None),
    ("GET", "/api/admin/plots/recall_events.png", None),
    ("GET", "/api/admin/plots/forgetting_curves.png?user_id={pid}", None),
    ("GET", "/api/admin/participants?pasted=1&failed_checks=0", None),
    ("POST", "/api/admin/participants/{pid}/erase", {"confirm": True, "reason": "asked for erasure"}),
    ("POST", "/api/admin/participants/{pid}/return-link", {}),
    ("POST", "/api/admin/participants/{pid}/return-link/revoke", {}),
    ("POST", "/api/admin/participants/{pid}/sign-out", {}),
    ("GET", "/api/admin/payments.csv", None),
    ("GET", "/api/admin/payments.csv?upload=1", None),
    ("GET", "/api/admin/preflight", None),
    ("POST", "/api/admin/report", {"language": "en"}),
]
ROUTE_IDS = [f"{m} {p}" for m, p, _ in ADMIN_ROUTES]
# Staff management (tests/routes/test_staff.py checks each role on these); {sid} is a staff member's id.
STAFF_ROUTES = [
    ("GET", "/api/admin/staff", None),
    ("POST", "/api/admin/staff", {"username": "newmember", "role": "viewer"}),
    ("GET", "/api/admin/staff/me", None),
    ("POST", "/api/admin/staff/{sid}/disable", {}),
    ("POST", "/api/admin/staff/{sid}/enable", {}),
    ("POST", "/api/admin/staff/{sid}/role", {"role": "viewer"}),
    ("POST", "/api/admin/staff/{sid}/reset-link", {}),
    ("POST", "/api/admin/staff/totp/setup", {}),
    ("POST", "/api/admin/staff/totp/confirm", {"code": "123456"}),
]
# reached without signing in: the one-time token in the body is the credential
OPEN_ADMIN_ROUTES = {"/api/admin/staff/accept"}


def _call(api, method, path, body):
    return api.get(path) if method == "GET" else api.post(path, json=body)


def _people(participant: ApiClient, other: ApiClient, anonymous: ApiClient) -> dict:
    pid = participant.get("/api/auth/me").get_json()["user"]["id"]
    other_id = other.get("/api/auth/me").get_json()["user"]["id"]
    return {"participant": participant, "other": other, "pid": pid, "other_id": other_id, "anonymous": anonymous}


@pytest.fixture
def people(make_participant, client):
    return _people(make_participant("alice"), make_participant("bob"), client)


@pytest.fixture(scope="module")
def shared(tmp_path_factory, migrated_sqlite_template):
    """One app, admin and two participants for the module's refused cases, which change nothing (``refused``
    checks that after each); building them per case was most of the file's time."""
    from app import create_app
    from services.participants.account_service import create_admin

    path = tmp_path_factory.mktemp("admin_access") / "shared.db"
    shutil.copyfile(migrated_sqlite_template, path)
    app = create_app(Settings.from_env(
        database_url=f"sqlite:///{path}", secret_key="test-secret", testing=True, scheduler_enabled=False,
        consolidate_inline=True, assignment_seed=1234, llm_providers=["offline"], embedding_provider="offline",
        rate_limits_enabled=False, run_migrations_on_start=False), clock=ManualClock(datetime(2026, 3, 2, 9, 0, 0)))
    accounts = []
    for username in ("alice", "bob"):
        api = ApiClient(app.test_client())
        assert api.register(username).status_code == 201
        accounts.append(api)
    runtime = app.extensions["memory_lab"]
    with runtime.db.Session() as session:
        create_admin(session, "labadmin", ADMIN_PASSWORD, runtime.clock)
    admin = ApiClient(app.test_client())
    assert admin.login("labadmin", ADMIN_PASSWORD).status_code == 200
    yield {**_people(*accounts, ApiClient(app.test_client())), "admin": admin, "app": app}
    runtime.background.shutdown()
    runtime.record_failure.flush()
    runtime.db.dispose()


def _state(shared: dict) -> tuple:
    """Every row of every table, and who each client is signed in as."""
    runtime = shared["app"].extensions["memory_lab"]
    with runtime.db.engine.connect() as conn:
        rows = {table: conn.execute(sa.text(f'SELECT * FROM "{table}"')).all()
                for table in sorted(sa.inspect(conn).get_table_names())}
    signed_in = [(role, shared[role].get("/api/auth/me").get_json())
                 for role in ("participant", "other", "anonymous", "admin")]
    return rows, signed_in


@pytest.fixture
def refused(shared):
    """The shared accounts, checked unchanged (database and sessions) after the case."""
    before = _state(shared)
    yield shared
    assert _state(shared) == before


@pytest.mark.parametrize(("method", "path", "body"), ADMIN_ROUTES, ids=ROUTE_IDS)
def test_anonymous_gets_401(refused, method, path, body):
    response = _call(refused["anonymous"], method, path.format(pid=refused["pid"]), body)
    assert response.status_code == 401
    assert response.get_json()["error"] == "login_required"


@pytest.mark.parametrize(("method", "path", "body"), ADMIN_ROUTES, ids=ROUTE_IDS)
def test_participant_gets_403(refused, method, path, body):
    response = _call(refused["participant"], method, path.format(pid=refused["pid"]), body)
    assert response.status_code == 403
    assert response.get_json()["error"] == "forbidden"


@pytest.mark.parametrize(("method", "path", "body"), ADMIN_ROUTES, ids=ROUTE_IDS)
def test_admin_is_served(people, admin_client, method, path, body, clock, study):
    if "/reset" in path:
        assert people["participant"].post("/api/tasks/T1/start").status_code == 201
    response = _call(admin_client, method, path.format(pid=people["pid"]), body)
    assert response.status_code == 200, response.get_data(as_text=True)[:300]
    if path.startswith("/api/admin/plots/"):
        assert response.mimetype == "image/png"
        assert response.data.startswith(b"\x89PNG\r\n\x1a\n")
    elif path.startswith(("/api/admin/export", "/api/admin/report")):
        assert response.mimetype == "application/zip"
    elif path.startswith("/api/admin/payments"):
        assert response.mimetype == "text/csv"
    else:
        assert response.is_json


def test_participant_cannot_read_another_participants_record(refused):
    api = refused["participant"]
    assert api.get(f"/api/admin/participants/{refused['other_id']}").status_code == 403
    assert api.get(f"/api/admin/plots/forgetting_curves.png?user_id={refused['other_id']}").status_code == 403
    # nor their own record through the admin API: the memory condition must stay hidden
    own = api.get(f"/api/admin/participants/{refused['pid']}")
    assert own.status_code == 403
    assert "memory_group" not in own.get_data(as_text=True)


def test_participant_cannot_touch_another_participants_messages(make_participant, clock, study):
    alice = make_participant("alice2")
    bob = make_participant("bob2")
    assert bob.post("/api/tasks/T1/start").status_code == 201
    bob_message = bob.post("/api/tasks/T1/messages", json={"content": "我叫鲍勃"}).get_json()["message"]["id"]
    assert alice.post("/api/tasks/T1/start").status_code == 201
    response = alice.post(f"/api/tasks/T1/messages/{bob_message}/reply")
    assert response.status_code == 404
    detail = alice.get("/api/tasks/T1").get_json()["task"]
    assert all(m["content"] != "我叫鲍勃" for m in detail["messages"])


def test_admin_page_redirects_participants_and_anonymous(refused):
    for api in (refused["participant"], refused["anonymous"]):
        response = api.get("/admin", headers={"Accept": "text/html"})
        assert response.status_code == 302
    assert refused["admin"].get("/admin", headers={"Accept": "text/html"}).status_code == 200


def test_state_changing_admin_routes_need_the_csrf_token(refused):
    raw = refused["admin"].raw
    for path in (f"/api/admin/participants/{refused['pid']}/withdraw", "/api/admin/consolidate-pending"):
        response = raw.post(path, json={"reason": "x"})
        assert response.status_code == 400
        assert response.get_json()["error"] == "csrf_failed"


def test_a_participant_record_from_walk(people, admin_client, clock, study):
    walk_task(people["participant"], clock, "T1", ["我叫爱丽丝。", "我养了一只猫。"], study=study)
    record = admin_client.get(f"/api/admin/participants/{people['pid']}").get_json()
    assert record["participant"]["tasks"]["T1"] == "done"
    assert [m["role"] for m in record["messages"]] == ["user", "assistant", "user", "assistant"]
    assert all("memory_context" in m for m in record["messages"] if m["role"] == "assistant")


def test_every_admin_route_is_in_the_openapi_document(app, client):
    import re

    document = client.get("/api/openapi.json").get_json()["paths"]
    rules = [r for r in app.url_map.iter_rules() if r.rule.startswith("/api/admin")]
    assert len(rules) >= 10
    for rule in rules:
        path = re.sub(r"<(?:\w+:)?(\w+)>", r"{\1}", rule.rule)
        assert path in document, path
        for method in rule.methods - {"HEAD", "OPTIONS"}:
            assert method.lower() in document[path], (method, path)
    # and every admin route is covered by the authorisation tests above
    tested = {re.sub(r"\?.*", "", p).replace("{pid}", "{user_id}").replace("/T1/", "/{task_id}/")
              for _, p, _ in ADMIN_ROUTES}
    tested = {re.sub(r"/plots/\w+\.png", "/plots/{name}.png", p) for p in tested}
    tested |= {p.replace("{sid}", "{user_id}") for _, p, _ in STAFF_ROUTES} | OPEN_ADMIN_ROUTES
    tested |= STUDY_DESIGN_PATHS  # tests/routes/test_study_design_access.py
    assert {re.sub(r"<(?:\w+:)?(\w+)>", r"{\1}", r.rule) for r in rules} <= tested
