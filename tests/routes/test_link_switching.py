"""Issue 28 item 8: a signed-in participant who opens another person's return link is asked first (a page
in their language, with a form carrying the CSRF token); nothing changes (login, device binding) until they
confirm with POST /r/<token>."""
from __future__ import annotations

import pytest
from sqlalchemy import func, select

from database.models import PanelDevice
from tests.conftest import ApiClient, walk_task

pytestmark = pytest.mark.postgres

THREE = ["你好，我叫小林。", "我喜欢在周末爬山。", "下次再聊吧。"]


def _enter(app, pid: str, language: str = "zh") -> ApiClient:
    api = ApiClient(app.test_client())
    assert api.post("/api/auth/panel", json={"external_id": pid, "consent": True,
                                             "language": language}).status_code == 201
    return api


def _me(api: ApiClient) -> int:
    return api.get("/api/auth/me").get_json()["user"]["id"]


def _devices(app, user_id: int) -> int:
    with app.extensions["memory_lab"].db.Session() as session:
        return session.scalar(select(func.count(PanelDevice.id)).where(PanelDevice.user_id == user_id))


def test_another_participants_link_asks_before_switching(app, clock):
    other = _enter(app, "otherparticipant0000001")
    walk_task(other, clock, "T1", THREE, study=app.extensions["memory_lab"].study)
    token = other.get("/api/me/return-link").get_json()["url"].rsplit("/r/", 1)[1]
    other_id = _me(other)

    me = _enter(app, "myownparticipantid00001", language="en")
    my_id = _me(me)
    page = me.get(f"/r/{token}")
    assert page.status_code == 200 and "text/html" in page.content_type
    html = page.get_data(as_text=True)
    assert "another participant" in html and f'action="/r/{token}"' in html and 'name="csrf_token"' in html
    assert _me(me) == my_id and _devices(app, other_id) == 1  # still me; my browser not bound to them

    refused = me.raw.post(f"/r/{token}")  # no CSRF token: refused, nothing changes
    assert refused.status_code == 400 and _me(me) == my_id

    confirmed = me.post(f"/r/{token}")
    assert confirmed.status_code == 302 and _me(me) == other_id and _devices(app, other_id) == 2


def test_the_same_participant_or_nobody_signed_in_goes_straight_in(app, clock):
    owner = _enter(app, "otherparticipant0000001")
    walk_task(owner, clock, "T1", THREE, study=app.extensions["memory_lab"].study)
    token = owner.get("/api/me/return-link").get_json()["url"].rsplit("/r/", 1)[1]
    assert owner.get(f"/r/{token}").status_code == 302
    assert ApiClient(app.test_client()).get(f"/r/{token}").status_code == 302


def test_a_chinese_participant_is_asked_in_chinese(app, clock):
    other = _enter(app, "otherparticipant0000001")
    walk_task(other, clock, "T1", THREE, study=app.extensions["memory_lab"].study)
    token = other.get("/api/me/return-link").get_json()["url"].rsplit("/r/", 1)[1]
    me = _enter(app, "myownparticipantid00001", language="zh")
    html = me.get(f"/r/{token}").get_data(as_text=True)
    assert "另一位参与者" in html and "another participant" not in html
