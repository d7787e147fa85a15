"""A paced reply in the participant's page (chat.reply_pacing, floor): the page is unchanged; the server holds
the reply back before its first token, the typing indicator shows meanwhile, and the whole reply arrives."""
from __future__ import annotations

import time

import pytest
from playwright.sync_api import expect

from tests.browser.test_participant_chat_view import log_in

pytestmark = pytest.mark.browser
FLOOR = 1.5


@pytest.fixture
def floor_pacing(live_server):
    settings = live_server.runtime.settings
    before = settings.study
    settings.study = before.with_overrides({"chat": {"reply_pacing": {"mode": "floor", "min_seconds": FLOOR}}})
    yield
    settings.study = before


def test_the_typing_indicator_shows_while_a_reply_is_held_back(new_page, bot, floor_pacing):
    bot().register("paced_reader")
    page = new_page(390, 844)
    log_in(page, "paced_reader")
    page.click(".task-card[data-task=T1] .start-task")
    page.fill("#message-input", "我最近在学做饭，想听听你的建议。")
    sent = time.monotonic()
    page.press("#message-input", "Enter")
    expect(page.locator(".msg.assistant.pending .typing")).to_be_visible(timeout=FLOOR * 1000)
    expect(page.locator(".msg.assistant:not(.pending)")).to_have_count(1, timeout=20_000)
    assert time.monotonic() - sent >= FLOOR
    reply = page.locator(".msg.assistant .msg-text").last.inner_text()
    assert reply.strip()
