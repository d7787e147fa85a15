"""Issue 28 item 18: on a phone (390 px) the header keeps to one row and never shows the panel id; it shows the
participant code."""
from __future__ import annotations

import pytest
from playwright.sync_api import expect
from sqlalchemy import select

from database.models import User

pytestmark = pytest.mark.browser

PANEL_ID = "5f3a9c2e1b77"

ONE_ROW = """() => {
  const bar = document.querySelector(".topbar");
  const shown = [...bar.children].filter((el) => !el.hidden && el.getBoundingClientRect().width > 0
                                          && !el.classList.contains("skip-link"));
  const tops = shown.map((el) => Math.round(el.getBoundingClientRect().top + el.getBoundingClientRect().height / 2));
  const overflow = shown.some((el) => el.scrollWidth > el.clientWidth + 1
                                      && getComputedStyle(el).overflow !== "hidden");
  return { height: bar.getBoundingClientRect().height, rows: new Set(tops.map((t) => Math.round(t / 8))).size,
           spread: Math.max(...tops) - Math.min(...tops), count: shown.length, overflow,
           barWidth: bar.scrollWidth, viewport: window.innerWidth };
}"""


@pytest.mark.parametrize("locale, logout", [("zh-CN", "退出登录"), ("en-US", "Log out")])
def test_the_phone_header_is_one_row_and_shows_the_participant_code_not_the_panel_id(new_page, live_server, screenshot,
                                                                                      locale, logout):
    panel_id = f"{PANEL_ID}{locale[:2]}"
    page = new_page(width=390, height=844, locale=locale)
    page.goto(f"/enter?pid={panel_id}")
    page.check("#consent-agree")
    page.click("#panel-continue")
    expect(page.locator(".task-card[data-task=T1]")).to_be_visible()
    with live_server.runtime.db.Session() as session:
        code = session.scalar(select(User.participant_code).where(User.external_id == panel_id))
    header = page.locator(".topbar")
    expect(header).to_contain_text(code)
    expect(page.locator("#logout")).to_have_text(logout)
    assert panel_id not in header.inner_text() and "panel:" not in header.inner_text()
    assert panel_id not in page.inner_text("body")  # nowhere on the task list either
    measured = page.evaluate(ONE_ROW)
    assert measured["count"] >= 4  # brand, code, language button, log out
    assert measured["spread"] <= 4, f"the header wraps onto more than one row: {measured}"
    assert measured["height"] <= 60, measured
    assert page.evaluate("(() => { const who = document.getElementById('who'); "
                         "return who.scrollWidth <= who.clientWidth; })()"), "the participant code is cut off"
    assert measured["barWidth"] <= measured["viewport"], f"the header is wider than the phone: {measured}"
    screenshot(page, f"participant_phone_header_{locale[:2]}")
