"""Issue 28 item 2: erase (or withdraw), then come back naive. The tombstone keeps keyed hashes (HMAC) of the
panel id and the username, never either in clear; a withdrawn or erased id is refused at the panel's door
with a page in the participant's language and the panel's "no places" code, and an erased username cannot
be registered again."""
from __future__ import annotations

import hashlib

import pytest
from sqlalchemy import select, text

from database.models import PanelEntry, User
from tests.conftest import ApiClient

pytestmark = pytest.mark.postgres

PID = "5f8a1c2e9b3d4a0012345678"
FULL_URL = "https://app.prolific.com/submissions/complete?cc={completion_code}"


@pytest.fixture
def settings(settings):
    settings.study = settings.study.with_overrides({
        "panel": {"id_parameter": "PROLIFIC_PID", "full_code": "CNOPLACE", "full_redirect_url": FULL_URL},
        "registration": {"password": True}})
    return settings


def _enter(app, external_id: str = PID, **extra):
    api = ApiClient(app.test_client())
    return api, api.post("/api/auth/panel", json={"external_id": external_id, "consent": True, **extra})


def _dump(app) -> str:
    """Every cell of the users and audit tables, as text."""
    with app.extensions["memory_lab"].db.engine.connect() as conn:
        return repr([conn.execute(text(f"SELECT * FROM {t}")).all() for t in ("users", "audit_log", "panel_entries")])


def test_an_erased_panel_id_cannot_enter_again_from_any_browser(app):
    api, first = _enter(app)
    assert first.status_code == 201
    gone = api.post("/api/me/withdraw", json={"confirm": True, "erase": True})
    assert gone.status_code == 200 and gone.get_json()["erased"] is True

    for browser in (api, ApiClient(app.test_client())):  # the same browser, and any other
        again = browser.post("/api/auth/panel", json={"external_id": PID.upper(), "consent": True})
        assert again.status_code == 403, again.get_json()
        body = again.get_json()
        assert body["error"] == "panel_id_closed"
        assert body["details"]["completion_code"] == "CNOPLACE"
        assert body["details"]["redirect_url"].endswith("cc=CNOPLACE")
    with app.extensions["memory_lab"].db.Session() as session:
        assert session.scalar(select(User).where(User.role == "participant", User.status == "active")) is None
        assert session.scalars(select(PanelEntry.outcome).where(PanelEntry.user_id.is_(None))).all() == [
            "closed", "closed"]
    dump = _dump(app)
    assert PID not in dump and PID.lower() not in dump  # nothing identifying in clear
    assert hashlib.sha256(PID.lower().encode()).hexdigest() not in dump  # and not a plain (unkeyed) hash


@pytest.mark.parametrize(("accept", "lang", "expected"), [
    ("en-US,en;q=0.9", None, "can no longer take part"),
    ("zh-CN,zh;q=0.9", None, "不能再参加"),
    ("zh-CN", "en", "can no longer take part"),
])
def test_the_panel_link_of_a_withdrawn_id_shows_a_page_in_the_participants_language(app, accept, lang, expected):
    api, _ = _enter(app)
    assert api.post("/api/me/withdraw", json={"confirm": True, "erase": False}).status_code == 200
    query = f"/enter?PROLIFIC_PID={PID}" + (f"&lang={lang}" if lang else "")
    page = ApiClient(app.test_client()).get(query, headers={"Accept-Language": accept})
    assert page.status_code == 403
    html = page.get_data(as_text=True)
    assert expected in html and "CNOPLACE" in html and "cc=CNOPLACE" in html
    assert ("不能再参加" in html) == (expected == "不能再参加")  # one language, the participant's
    # and the same browser that entered (device cookie) is refused too: a withdrawn id does not return
    again = api.post("/api/auth/panel", json={"external_id": PID})
    assert again.status_code == 403 and again.get_json()["error"] == "panel_id_closed"


def test_an_erased_username_cannot_be_registered_again_and_is_not_kept_in_clear(app):
    api = ApiClient(app.test_client())
    assert api.register("Leaver.Lin").status_code == 201
    assert api.post("/api/me/withdraw", json={"confirm": True, "erase": True}).status_code == 200
    again = ApiClient(app.test_client()).register("leaver.lin")
    assert again.status_code == 409 and again.get_json()["error"] == "username_unavailable"
    assert "leaver.lin" not in _dump(app).lower()
    assert ApiClient(app.test_client()).register("someone.new").status_code == 201


def test_a_new_id_still_enters(app):
    assert _enter(app)[1].status_code == 201
    assert _enter(app, "anotherid00000000000001")[1].status_code == 201
