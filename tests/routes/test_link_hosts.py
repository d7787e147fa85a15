"""Issue 28 item 10: personal links are built only from PUBLIC_BASE_URL or a host on PUBLIC_HOSTS (or the
loopback addresses of a local run), never from whatever Host header a request carries; otherwise no link
is issued (503 link_host_not_configured) and nothing is stored."""
from __future__ import annotations

import pytest
from sqlalchemy import func, select

from database.models import ReturnLink
from tests.conftest import ApiClient, walk_task

THREE = ["你好，我叫小林。", "我喜欢在周末爬山。", "下次再聊吧。"]


def _ready(app, clock) -> tuple[ApiClient, int]:
    api = ApiClient(app.test_client())
    assert api.post("/api/auth/panel", json={"external_id": "5f8a1c2e9b3d4a0012345678", "consent": True}
                    ).status_code == 201
    walk_task(api, clock, "T1", THREE, study=app.extensions["memory_lab"].study)
    return api, api.get("/api/auth/me").get_json()["user"]["id"]


def _from(api: ApiClient, host: str) -> ApiClient:
    """The same browser's login cookie, sent to ``host`` (the test client keys cookies by host)."""
    api.raw.set_cookie("session", api.raw.get_cookie("session").value, domain=host)
    return api


def _links(app) -> int:
    with app.extensions["memory_lab"].db.Session() as session:
        return session.scalar(select(func.count(ReturnLink.id)))


@pytest.mark.postgres
def test_a_foreign_host_header_gets_no_link(app, admin_client, clock):
    api, user_id = _ready(app, clock)
    before = _links(app)
    _from(api, "evil.example")
    _from(admin_client, "evil.example")
    evil = api.get("/api/me/return-link", headers={"Host": "evil.example"})
    assert evil.status_code == 503 and evil.get_json()["error"] == "link_host_not_configured"
    assert "evil.example" not in evil.get_data(as_text=True)
    assert api.get("/api/me/next-task.ics", headers={"Host": "evil.example"}).status_code == 503
    admin = admin_client.post(f"/api/admin/participants/{user_id}/return-link", headers={"Host": "evil.example"})
    assert admin.status_code == 503
    assert _links(app) == before  # nothing issued
    assert api.get("/api/me/return-link").get_json()["url"].startswith("http://localhost/r/")  # a local run


# Which host a link is built from is settled before anything is stored: the two tests below run on SQLite, and
# the PostgreSQL pass stores and refuses links in the test above (and in tests/routes/test_revoked_links.py).
def test_public_base_url_wins_over_the_host_header(app, clock):
    app.extensions["memory_lab"].settings.public_base_url = "https://study.example.org"
    api, _ = _ready(app, clock)
    link = _from(api, "evil.example").get("/api/me/return-link", headers={"Host": "evil.example"}).get_json()["url"]
    assert link.startswith("https://study.example.org/r/")


def test_a_host_on_public_hosts_is_used(app, clock):
    app.extensions["memory_lab"].settings.public_hosts = ("study.example.org",)
    api, _ = _ready(app, clock)
    link = _from(api, "study.example.org").get("/api/me/return-link",
                                               headers={"Host": "study.example.org"}).get_json()["url"]
    assert link.startswith("http://study.example.org/r/")
    assert _from(api, "evil.example").get("/api/me/return-link", headers={"Host": "evil.example"}).status_code == 503


def test_public_hosts_is_read_from_the_environment(monkeypatch):
    from config import Settings

    monkeypatch.setenv("PUBLIC_HOSTS", " study.example.org, lab.example.org:8443 ,")
    assert Settings.from_env(secret_key="x").public_hosts == ("study.example.org", "lab.example.org:8443")
