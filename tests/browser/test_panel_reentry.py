"""Panel re-entry in a real browser (issue 18 items 1 and 13): a second browser with a known panel id gets
the refusal page in its own language, while the browser that entered first gets straight back in; a
returning participant in English sees no consent page and keeps their account's language."""
from __future__ import annotations

import pytest
from playwright.sync_api import expect
from sqlalchemy import select

from database.models import AuditLog, User

pytestmark = pytest.mark.browser

ENGLISH = 'localStorage.setItem("memorylab.language", "en")'


def _consent(page, panel_id: str) -> None:
    page.goto(f"/enter?pid={panel_id}&STUDY_ID=study-1&SESSION_ID=first")
    page.check("#consent-agree")
    page.click("#panel-continue")
    expect(page.locator(".task-card[data-task=T1]")).to_have_attribute("data-status", "available")


def test_a_second_browser_gets_the_refusal_page_in_its_language_and_the_first_gets_back_in(new_page, live_server):
    first = new_page()
    _consent(first, "reentry0001")

    second = new_page()
    second.context.add_init_script(ENGLISH)  # this browser's reader chose English
    second.goto("/enter?pid=reentry0001&STUDY_ID=study-1&SESSION_ID=stolen")
    expect(second.locator("#panel-problem")).to_have_attribute("data-code", "panel_reentry_refused")
    expect(second.locator("h1")).to_have_text("This id cannot be opened here")
    expect(second.locator("#panel-problem")).to_contain_text("personal link")
    expect(second.locator("#panel-contact")).to_contain_text("research team")
    expect(second.locator(".task-card")).to_have_count(0)
    assert second.evaluate("fetch('/api/tasks').then((r) => r.status)") == 401

    first.goto("/enter?pid=reentry0001&STUDY_ID=study-1&SESSION_ID=second")
    expect(first.locator(".task-card[data-task=T1]")).to_have_attribute("data-status", "available")
    expect(first.locator("#consent-agree")).to_have_count(0)
    with live_server.runtime.db.Session() as session:
        user = session.scalar(select(User).where(User.external_id == "reentry0001"))
        under_victim = session.scalars(select(AuditLog).where(AuditLog.action == "panel_reentry_refused",
                                                              AuditLog.target_user_id == user.id)).all()
        apart = session.scalars(select(AuditLog).where(AuditLog.action == "panel_reentry_refused",
                                                       AuditLog.target_user_id.is_(None))).all()
        # a refused entry is stored apart and counted, never written into the record it tried to open (issue 28)
        assert under_victim == [] and len(apart) >= 1


def test_a_returning_english_panel_participant_sees_no_consent_page(new_page):
    page = new_page()
    page.context.add_init_script("if (!sessionStorage.getItem('seeded')) {" + ENGLISH
                                 + "; sessionStorage.setItem('seeded', '1'); }")
    page.goto("/enter?pid=english0001")
    expect(page.locator("h1")).to_have_text("Informed consent")
    page.check("#consent-agree")
    page.click("#panel-continue")
    expect(page.locator(".task-card[data-task=T1]")).to_have_attribute("data-status", "available")
    page.click("#logout")  # the login session ends; the browser keeps its device cookie
    expect(page.locator("#login-submit")).to_be_visible()
    page.evaluate('localStorage.setItem("memorylab.language", "zh")')  # the page would now default to Chinese

    page.goto("/enter?pid=english0001&STUDY_ID=study-1&SESSION_ID=wave2")
    expect(page.locator(".task-card[data-task=T1]")).to_have_attribute("data-status", "available")
    expect(page.locator("#consent-agree")).to_have_count(0)
    expect(page.locator("html")).to_have_attribute("lang", "en")
