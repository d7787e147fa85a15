"""Issue 28 item 16: in pilot mode the admin's monitor shows a chat's time in real time, with the study time
labelled beside it (the live server runs 1 study day in 864 s: 100 study seconds per real second)."""
from __future__ import annotations

import re
import time

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import TIME_SCALE

# the shared admin signs in with an English browser here: its language goes back to Chinese after each test
pytestmark = [pytest.mark.browser, pytest.mark.usefixtures("admin_back_in_chinese")]


def test_the_monitor_shows_real_chat_time_with_the_study_time_labelled(new_page, admin_account, bot):
    chatting = bot()
    user = chatting.register("clock_chatting")["user"]
    chatting.start("T1")
    time.sleep(1.2)
    chatting.say("T1", "I am trying out the pilot and its clocks.")  # about 1.2 real s, 120 study s credited

    page = new_page(locale="en-US")
    page.goto("/admin/login")
    page.fill("#admin-login-username", admin_account[0])
    page.fill("#admin-login-password", admin_account[1])
    page.click("#admin-login-submit")
    cell = page.locator(f"#participants tbody tr[data-id='{user['id']}'] .task-cell[data-task=T1]")
    expect(cell).to_contain_text("study time")
    text = cell.inner_text()
    match = re.search(r"active (\d+):(\d\d) \(study time (\d+):(\d\d)\)", text)
    assert match, text
    real = int(match[1]) * 60 + int(match[2])
    study = int(match[3]) * 60 + int(match[4])
    assert real <= 5 and study >= 100, text  # real seconds shown first; study seconds (x100) labelled
    assert abs(study * TIME_SCALE - real) <= 1.5, text
