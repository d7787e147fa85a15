"""Issue 28 item 15: a withdrawn participant's own task list says withdrawn, with the lab's contact, instead of
"locked, locked"."""
from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import sign_in

pytestmark = pytest.mark.browser


@pytest.mark.parametrize("locale, withdrawn, contact", [("zh-CN", "已退出", "memory-lab@example.org"),
                                                         ("en-US", "Withdrawn", "memory-lab@example.org")])
def test_a_withdrawn_participant_s_task_list_says_withdrawn_with_the_contact(new_page, bot, locale, withdrawn,
                                                                            contact):
    username = f"withdrew_{locale[:2]}"
    participant = bot()
    participant.post("/api/auth/register", {"username": username, "password": "bot-password-1", "consent": True,
                                            "language": locale[:2]})
    participant.post("/api/me/withdraw", {"confirm": True, "erase": False})
    page = new_page(locale=locale)
    sign_in(page, username)
    expect(page.locator(".task-card")).to_have_count(4)
    for task_id in ("T1", "T2", "T3", "T4"):
        card = page.locator(f".task-card[data-task={task_id}]")
        expect(card.locator(".badge")).to_have_text(withdrawn)
    assert page.locator(".badge", has_text="未解锁").count() == 0
    assert page.locator(".badge", has_text="Locked").count() == 0
    expect(page.locator("#withdrawn-notice")).to_contain_text(contact)
    expect(page.locator("#withdraw-link")).to_have_count(0)
