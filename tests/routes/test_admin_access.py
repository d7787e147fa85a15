"""Every admin route refuses anonymous callers (401) and participants (403), and answers admins."""
from __future__ import annotations

import pytest

from tests.conftest import walk_task

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


@pytest.fixture
def people(make_participant, client):
    participant = make_participant("alice")
    other = make_participant("bob")
    pid = participant.get("/api/auth/me").get_json()["user"]["id"]
    other_id = other.get("/api/auth/me").get_json()["user"]["id"]
    return {"participant": participant, "pid": pid, "other_id": other_id, "anonymous": client}


@pytest.mark.parametrize(("method", "path", "body"), ADMIN_ROUTES, ids=ROUTE_IDS)
def test_anonymous_gets_401(people, method, path, body):
    response = _call(people["anonymous"], method, path.format(pid=people["pid"]), body)
    assert response.status_code == 401
    assert response.get_json()["error"] == "login_required"


@pytest.mark.parametrize(("method", "path", "body"), ADMIN_ROUTES, ids=ROUTE_IDS)
def test_participant_gets_403(people, method, path, body):
    response = _call(people["participant"], method, path.format(pid=people["pid"]), body)
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


def test_participant_cannot_read_another_participants_record(people):
    api = people["participant"]
    assert api.get(f"/api/admin/participants/{people['other_id']}").status_code == 403
    assert api.get(f"/api/admin/plots/forgetting_curves.png?user_id={people['other_id']}").status_code == 403
    # nor their own record through the admin API: the memory condition must stay hidden
    own = api.get(f"/api/admin/participants/{people['pid']}")
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


def test_admin_page_redirects_participants_and_anonymous(people, admin_client):
    for api in (people["participant"], people["anonymous"]):
        response = api.get("/admin", headers={"Accept": "text/html"})
        assert response.status_code == 302
    assert admin_client.get("/admin", headers={"Accept": "text/html"}).status_code == 200


def test_state_changing_admin_routes_need_the_csrf_token(people, admin_client):
    raw = admin_client.raw
    for path in (f"/api/admin/participants/{people['pid']}/withdraw", "/api/admin/consolidate-pending"):
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
    assert {re.sub(r"<(?:\w+:)?(\w+)>", r"{\1}", r.rule) for r in rules} <= tested
