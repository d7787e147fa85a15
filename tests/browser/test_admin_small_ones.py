"""Issue 28 item 19 (the admin's small ones): an action's note follows the admin's switch of language, and the
forgetting-curve selector opens on a participant whose condition has a curve (L4)."""
from __future__ import annotations

import pytest
from playwright.sync_api import expect
from sqlalchemy import select

from database.models import Assignment

# the shared admin signs in with an English browser here: its language goes back to Chinese after each test
pytestmark = [pytest.mark.browser, pytest.mark.usefixtures("admin_back_in_chinese")]


def _sign_in(page, admin_account) -> None:
    page.goto("/admin/login")
    page.fill("#admin-login-username", admin_account[0])
    page.fill("#admin-login-password", admin_account[1])
    page.click("#admin-login-submit")
    expect(page.locator("#participants")).to_be_visible()


def test_an_action_s_note_is_shown_again_in_english_after_the_switch(new_page, admin_account, bot):
    someone = bot().register("toast_subject")["user"]
    page = new_page(locale="zh-CN")
    _sign_in(page, admin_account)
    page.goto(f"/admin#/participant/{someone['id']}")
    page.click("#action-consolidate")
    note = page.locator("#record-note")
    expect(note).to_contain_text("已完成：立即整合记忆")
    page.click("#language-toggle")
    expect(page.locator("#action-consolidate")).to_have_text("Consolidate now")
    expect(page.locator("#record-note")).to_contain_text("Done: Consolidate now")
    expect(page.locator("#record-note")).not_to_contain_text("已完成")


def test_the_forgetting_curve_selector_opens_on_an_l4_participant(new_page, live_server, admin_account, bot):
    for n in range(4):  # one assignment block: every condition once
        bot().register(f"curve_pick_{n}")
    with live_server.runtime.db.Session() as session:
        groups = dict(session.execute(select(Assignment.user_id, Assignment.memory_group)).all())
    assert "L4" in groups.values()
    page = new_page(locale="en-US")
    _sign_in(page, admin_account)
    page.goto("/admin#/plots")
    selector = page.locator("#plot-participant")
    expect(selector.locator("option")).not_to_have_count(0)
    page.wait_for_function("document.querySelector('#plot-participant').value !== ''")
    assert groups[int(selector.input_value())] == "L4"
