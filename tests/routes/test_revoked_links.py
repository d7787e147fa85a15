"""Issue 28 item 6: revoking a return link leaves nobody inside through it. "Revoke" and "revoke and issue new"
end the participant's sessions (one opened through the leaked link among them) and remove the device
bindings made through the revoked links; "sign out everywhere" ends every session and device binding."""
from __future__ import annotations

import pytest
from sqlalchemy import func, select

from database.models import AuditLog, PanelDevice
from tests.conftest import ApiClient, walk_task

pytestmark = pytest.mark.postgres

PID = "5f8a1c2e9b3d4a0012345678"
THREE = ["你好，我叫小林。", "我喜欢在周末爬山。", "下次再聊吧。"]


def _enter(api: ApiClient):
    return api.post("/api/auth/panel", json={"external_id": PID, "consent": True})


def _leaked(app, clock) -> tuple[ApiClient, ApiClient, int, str]:
    """The participant, their leaked link opened in a stranger's browser, their id and the link."""
    owner = ApiClient(app.test_client())
    assert _enter(owner).status_code == 201
    walk_task(owner, clock, "T1", THREE, study=app.extensions["memory_lab"].study)
    token = owner.get("/api/me/return-link").get_json()["url"].rsplit("/r/", 1)[1]
    stranger = ApiClient(app.test_client())
    assert stranger.get(f"/r/{token}").status_code == 302
    assert stranger.get("/api/tasks").status_code == 200  # inside through the link
    user_id = owner.get("/api/auth/me").get_json()["user"]["id"]
    return owner, stranger, user_id, token


@pytest.mark.parametrize("action", ["return-link", "return-link/revoke"])
def test_revoking_the_links_ends_the_link_session_and_its_device_binding(app, admin_client, clock, action):
    _owner, stranger, user_id, token = _leaked(app, clock)
    assert admin_client.post(f"/api/admin/participants/{user_id}/{action}").status_code == 200
    assert stranger.get("/api/tasks").status_code == 401  # the session opened through the link is over
    assert _enter(stranger).status_code == 403  # and its device cookie no longer enters by panel id
    assert stranger.get(f"/r/{token}").status_code == 404
    with app.extensions["memory_lab"].db.Session() as session:
        assert session.scalar(select(func.count(PanelDevice.id)).where(PanelDevice.user_id == user_id)) == 1


def test_the_owner_browser_keeps_its_own_binding(app, admin_client, clock):
    owner, _stranger, user_id, _ = _leaked(app, clock)
    assert admin_client.post(f"/api/admin/participants/{user_id}/return-link/revoke").status_code == 200
    assert _enter(owner).status_code == 200  # the panel link from the participant's own browser still works


def test_sign_out_everywhere_ends_every_session_and_binding(app, admin_client, clock):
    owner, stranger, user_id, _ = _leaked(app, clock)
    response = admin_client.post(f"/api/admin/participants/{user_id}/sign-out")
    assert response.status_code == 200 and response.get_json()["devices_removed"] == 2
    for browser in (owner, stranger):
        assert browser.get("/api/tasks").status_code == 401
        assert _enter(browser).status_code == 403
    with app.extensions["memory_lab"].db.Session() as session:
        assert session.scalar(select(func.count(AuditLog.id)).where(AuditLog.action == "signed_out_everywhere")) == 1


def test_sign_out_everywhere_needs_the_admin_role(app, clock):
    owner, _stranger, user_id, _ = _leaked(app, clock)
    assert owner.post(f"/api/admin/participants/{user_id}/sign-out").status_code == 403
