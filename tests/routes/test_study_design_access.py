"""Every study-design route (routes/study_admin.py) refuses anonymous callers (401) and participants (403)."""
from __future__ import annotations

import pytest

# (method, path, body)
STUDY_DESIGN_ROUTES = [
    ("GET", "/api/admin/study", None),
    ("GET", "/api/admin/study/versions", None),
    ("GET", "/api/admin/study/versions/{ref}", None),
    ("GET", "/api/admin/study/diff", None),
    ("GET", "/api/admin/study/export", None),
    ("POST", "/api/admin/study/drafts", {"definition": {}}),
    ("POST", "/api/admin/study/drafts/{draft_id}/publish", {"reason": "x"}),
    ("POST", "/api/admin/preview", {"condition": "L4", "task": "T1", "language": "en"}),
    ("GET", "/api/admin/previews", None),
    ("POST", "/api/admin/previews/delete", {}),
    ("GET", "/api/admin/demo-links", None),
    ("POST", "/api/admin/demo-links", {"condition": "L4", "language": "en"}),
    ("POST", "/api/admin/demo-links/{link_id}/revoke", {}),
    ("POST", "/api/admin/test-participants", {"condition": "L4", "language": "en"}),
]
STUDY_DESIGN_PATHS = {path for _, path, _ in STUDY_DESIGN_ROUTES}
IDS = [f"{m} {p}" for m, p, _ in STUDY_DESIGN_ROUTES]


def _call(api, method, path, body):
    path = path.format(ref="live", draft_id=1, link_id=1)
    return api.get(path) if method == "GET" else api.post(path, json=body)


@pytest.mark.parametrize(("method", "path", "body"), STUDY_DESIGN_ROUTES, ids=IDS)
def test_anonymous_and_participants_are_refused(client, make_participant, method, path, body):
    assert _call(client, method, path, body).status_code == 401
    response = _call(make_participant(), method, path, body)
    assert response.status_code == 403 and response.get_json()["error"] == "forbidden"


@pytest.mark.parametrize(("method", "path", "body"), STUDY_DESIGN_ROUTES, ids=IDS)
def test_admins_are_served(admin_client, method, path, body):
    response = _call(admin_client, method, path, body)
    # a draft of {} is refused naming its keys; draft 1 and demo link 1 do not exist here
    expected = {"/api/admin/study/drafts": 400, "/api/admin/study/drafts/{draft_id}/publish": 404,
                "/api/admin/demo-links/{link_id}/revoke": 404}.get(path, 201 if method == "POST" else 200)
    if path in ("/api/admin/previews/delete", "/api/admin/preview"):
        expected = 200
    assert response.status_code == expected, response.get_data(as_text=True)[:300]
