"""Issue 28 item 4: a Chinese message written through an input method (composition events, no key presses the page
can see) is recorded as composed, with its input and composition events, and is not flagged as scripted."""
from __future__ import annotations

import pytest
from playwright.sync_api import expect
from sqlalchemy import select

from database.models import Message, User
from services.participants.quality import typing_flags
from tests.browser.conftest import sign_in

pytestmark = pytest.mark.browser

# 39 characters in four compositions, as a pinyin input method commits them
CHUNKS = ["今天下午我和两个朋友", "去图书馆复习功课，", "然后一起去学校食堂吃了晚饭，", "聊得很开心。"]
MESSAGE = "".join(CHUNKS)

COMPOSE = """(chunk) => {
  const box = document.getElementById("message-input");
  const pinyin = "pinyin";
  box.dispatchEvent(new CompositionEvent("compositionstart", { data: "", bubbles: true }));
  box.dispatchEvent(new CompositionEvent("compositionupdate", { data: pinyin, bubbles: true }));
  box.dispatchEvent(new InputEvent("input",
    { inputType: "insertCompositionText", data: pinyin, isComposing: true, bubbles: true }));
  box.value += chunk;  // the input method commits the chosen characters
  box.dispatchEvent(new CompositionEvent("compositionupdate", { data: chunk, bubbles: true }));
  box.dispatchEvent(new InputEvent("input",
    { inputType: "insertCompositionText", data: chunk, isComposing: true, bubbles: true }));
  box.dispatchEvent(new CompositionEvent("compositionend", { data: chunk, bubbles: true }));
}"""


def test_a_message_composed_through_an_input_method_is_not_flagged(new_page, live_server, bot):
    assert len(MESSAGE) == 39
    participant = bot()
    participant.register("ime_browser")
    page = new_page(width=1280, height=900)
    sign_in(page, "ime_browser")
    page.click(".task-card[data-task=T1] .start-task")
    expect(page.locator("#time-left")).to_be_visible()
    for chunk in CHUNKS:
        page.eval_on_selector("#message-input", "box => box.focus()")
        page.evaluate(COMPOSE, chunk)
        page.wait_for_timeout(1_000)  # a person choosing characters: about 3 s for 39 characters
    expect(page.locator("#message-input")).to_have_value(MESSAGE)
    page.click("#send")  # no key press at all
    expect(page.locator(".msg.assistant:not(.pending)")).to_have_count(1)

    runtime = live_server.runtime
    with runtime.db.Session() as session:
        user_id = session.scalar(select(User.id).where(User.username == "ime_browser"))
        sent = session.scalar(select(Message).where(Message.user_id == user_id, Message.role == "user"))
        assert sent.content == MESSAGE
        assert sent.keystrokes == 0 and sent.typing_ms >= 2_900
        assert (sent.input_kind, sent.composition_events, sent.input_events) == ("composed", 4, 8)
        flags = typing_flags(len(sent.content), sent.typing_ms, sent.keystrokes, sent.pasted_chars,
                             runtime.study.typing_checks, sent.input_kind)
    assert flags == [], f"an honest input-method message was flagged: {flags}"
