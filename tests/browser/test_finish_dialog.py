"""Issue 28 item 19 (the participant's small ones): the minimum-time hint counts down, with the same number in
both languages; the finish dialog's two buttons say different things; and the default study (no completion
codes) warns about too few messages without promising a completion code."""
from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import sign_in

pytestmark = pytest.mark.browser


def _seconds(text: str) -> int:
    match = re.search(r"(\d+)", text)
    assert match, text
    return int(match[1])


def test_the_minimum_hint_counts_down_and_the_finish_dialog_is_clear(new_page, bot):
    bot().register("finish_dialog")
    page = new_page(locale="zh-CN")
    sign_in(page, "finish_dialog")
    page.click(".task-card[data-task=T1] .start-task")
    hint = page.locator(".finish-hint")
    expect(hint).to_contain_text("秒后可以结束")
    first = _seconds(hint.inner_text())
    assert 1 <= first <= 3  # 300 study seconds at 1/100: three real seconds
    page.wait_for_timeout(1_100)
    if hint.is_visible():
        assert _seconds(hint.inner_text()) < first, "the hint does not count down"

    expect(page.locator("#finish")).to_be_enabled(timeout=8_000)
    page.click("#finish")
    finish_text = page.locator("#finish").inner_text()
    confirm_text = page.locator("#finish-confirm").inner_text()
    assert confirm_text != finish_text, "the dialog shows two identical buttons"
    expect(page.locator("#finish-confirm")).to_have_text("确定结束")
    warning = page.locator("#finish-below-minimum")
    expect(warning).to_be_visible()
    expect(warning).to_contain_text("少于研究要求的 3 条")
    expect(warning).not_to_contain_text("完成码")  # the default study has no completion codes


def test_the_minimum_hint_gives_the_same_time_in_english(new_page, bot):
    bot().post("/api/auth/register", {"username": "finish_dialog_en", "password": "bot-password-1", "consent": True,
                                      "language": "en"})
    page = new_page(locale="en-US")
    sign_in(page, "finish_dialog_en")
    page.click(".task-card[data-task=T1] .start-task")
    hint = page.locator(".finish-hint")
    expect(hint).to_contain_text("more seconds of chat")
    assert 1 <= _seconds(hint.inner_text()) <= 3
    expect(page.locator("#finish")).to_be_enabled(timeout=8_000)
    page.click("#finish")
    expect(page.locator("#finish-confirm")).to_have_text("Yes, finish")
    expect(page.locator("#finish-below-minimum")).to_contain_text("counts as incomplete")
    expect(page.locator("#finish-below-minimum")).not_to_contain_text("completion code")
