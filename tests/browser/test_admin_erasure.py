"""Erasing a participant from the admin console: a reason, then the browser's confirm dialog; cancelling
it changes nothing, accepting it leaves the tombstone view. The monitor's paste filter and flags work."""
from __future__ import annotations

import pytest
from playwright.sync_api import expect
from sqlalchemy import select

from database.models import Message, User
from tests.browser.test_admin_page import log_in

pytestmark = pytest.mark.browser


def test_admin_erases_a_participant_after_confirming(new_page, live_server, admin_account, bot):
    participant = bot()
    user = participant.register("bot_erase")["user"]
    participant.start("T1")
    participant.post("/api/tasks/T1/messages", {"content": "这是要被删除的话。", "typing_ms": 300, "keystrokes": 1,
                                                "pasted_chars": 9, "focus_losses": 0})
    page = new_page()
    page.goto("/#/login")
    log_in(page, *admin_account)
    page.check("#filter-pasted")
    expect(page.locator(f"#participants tr[data-id='{user['id']}'] .badge.pasted")).to_have_text("粘贴 1")
    page.goto(f"/admin#/participant/{user['id']}")
    expect(page.locator(".turn.user .quality")).to_contain_text("9")

    page.click("#action-erase")
    expect(page.locator("#actions .notice")).to_contain_text("请填写原因")
    page.fill("#erase-reason", "asked for erasure by e-mail")
    page.once("dialog", lambda dialog: dialog.dismiss())
    page.click("#action-erase")
    expect(page.locator("#action-erase")).to_be_enabled()
    with live_server.runtime.db.Session() as session:
        assert session.scalar(select(User.status).where(User.id == user["id"])) == "active"

    seen = []
    page.once("dialog", lambda dialog: (seen.append(dialog.message), dialog.accept()))
    page.click("#action-erase")
    expect(page.locator("#erased-notice")).to_be_visible()
    expect(page.locator("#tombstone")).to_contain_text(user["participant_code"])
    expect(page.locator("#tombstone")).to_contain_text("asked for erasure by e-mail")
    expect(page.locator("body")).not_to_contain_text("这是要被删除的话")
    assert "无法撤销" in seen[0]
    with live_server.runtime.db.Session() as session:
        assert session.scalar(select(User.status).where(User.id == user["id"])) == "erased"
        assert session.scalar(select(Message.id).where(Message.user_id == user["id"])) is None
