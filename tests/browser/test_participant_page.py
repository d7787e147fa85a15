"""The participant page in headless Chromium: consent -> register -> T1 in pilot mode -> log out.

Runs at a phone's width. Checks what a participant sees (the timer, the reply, a failed reply kept
with a retry button, per-item questionnaire errors from the server) and what the database holds
afterwards, and that no memory-condition id ever appears on the page.
"""
from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect
from sqlalchemy import select

from database.models import Message, QuestionnaireResponse, TaskSession, User
from tests.browser.conftest import sign_in

pytestmark = pytest.mark.browser

CONDITION_IDS = re.compile(r"\b(L[1-4]|S1|R1)\b")
FIRST_MESSAGE = "你好！我叫小林，在读研究生，周末喜欢去香山爬山。"
SECOND_MESSAGE = "最近在准备毕业论文，有点焦虑，晚上睡不好。"


def assert_condition_hidden(page) -> None:
    text = page.inner_text("body")
    assert not CONDITION_IDS.search(text), f"a memory-condition id is visible: {text!r}"


def answer_questionnaire(page, *, skip: str) -> dict[str, int]:
    """Tick every scale item except `skip`: likert items 5, the IOS item 4. Returns what was chosen."""
    chosen = {}
    for item in page.locator(".q-item").all():
        item_id = item.get_attribute("data-item-id")
        kind = item.get_attribute("data-type")
        if item_id == skip:
            continue
        value = 4 if kind == "ios" else 5
        item.locator(f"label[for='q-{item_id}-{value}']").click()
        chosen[item_id] = value
    return chosen


def test_participant_registers_does_t1_and_logs_out(new_page, live_server, screenshot):
    page = new_page(width=390, height=844)
    page.goto("/")

    expect(page.locator("h1")).to_have_text("知情同意")
    expect(page.locator(".consent-text")).to_contain_text("欢迎参加本研究")
    page.click("#consent-continue")
    expect(page.get_by_role("alert")).to_contain_text("请先勾选同意")
    page.check("#consent-agree")
    page.click("#consent-continue")

    page.fill("#username", "browser_p1")
    page.fill("#password", "browser-pass-1")
    page.fill("#password-repeat", "browser-pass-1")
    page.click("#register-submit")

    cards = page.locator(".task-card")
    expect(cards).to_have_count(4)
    expect(page.locator(".task-card[data-task=T1]")).to_have_attribute("data-status", "available")
    expect(page.locator(".task-card[data-task=T2]")).to_have_attribute("data-status", "locked")
    assert_condition_hidden(page)
    screenshot(page, "participant_tasks")

    page.click(".task-card[data-task=T1] .start-task")
    expect(page.locator("#time-left")).to_have_text(re.compile(r"^\d+:\d\d$"))
    expect(page.locator("#finish")).to_be_disabled()
    page.fill("#message-input", FIRST_MESSAGE)
    page.press("#message-input", "Enter")
    replies = page.locator(".msg.assistant:not(.pending)")
    expect(replies).to_have_count(1)
    expect(replies.first.locator(".msg-text")).not_to_have_text("")
    expect(page.locator("#message-input")).to_have_value("")

    # No provider answers: the message stays on the page with a retry button, then the retry works.
    live_server.replies.failing.set()
    try:
        page.fill("#message-input", SECOND_MESSAGE)
        page.click("#send")
        failed = page.locator(".msg.user.failed")
        expect(failed).to_have_count(1)
        expect(failed.locator(".msg-text")).to_have_text(SECOND_MESSAGE)
        expect(failed.locator(".retry")).to_be_visible()
    finally:
        live_server.replies.failing.clear()
    page.click(".msg.user.failed .retry")
    expect(replies).to_have_count(2)
    expect(page.locator(".msg.failed")).to_have_count(0)
    assert_condition_hidden(page)
    screenshot(page, "participant_chat")

    expect(page.locator("#finish")).to_be_enabled(timeout=8_000)
    page.click("#finish")
    page.click("#finish-confirm")

    expect(page.locator("form.questionnaire")).to_be_visible()
    expect(page.locator(".q-ios svg")).to_have_count(7)
    chosen = answer_questionnaire(page, skip="pu_1")
    page.click("#questionnaire-submit")
    expect(page.locator("#q-pu_1 .item-error")).to_have_text("这道题需要回答。")
    expect(page.locator(".q-item.has-error")).to_have_count(1)
    screenshot(page, "participant_questionnaire")
    page.locator("label[for='q-pu_1-6']").click()
    chosen["pu_1"] = 6
    expect(page.locator(".q-item.has-error")).to_have_count(0)
    page.click("#questionnaire-submit")

    # the page after a task: thanks, the personal return link and when the next task unlocks
    expect(page.locator(".notice.ok")).to_contain_text("问卷已提交")
    expect(page.locator("#return-link")).to_have_value(re.compile(r"/r/[\w-]{40,}$"))
    expect(page.locator("#next-task")).to_contain_text("解锁")
    expect(page.locator("#completion-code")).to_have_count(0)  # no panel code in this study
    page.click("#back-to-tasks")
    expect(page.locator(".task-card[data-task=T1]")).to_have_attribute("data-status", "done")
    expect(page.locator(".task-card[data-task=T2] .task-meta")).to_contain_text("解锁时间")
    assert_condition_hidden(page)

    page.click("#logout")
    expect(page.locator("h1")).to_have_text("登录")
    expect(page.locator("#logout")).to_be_hidden()

    with live_server.runtime.db.Session() as session:
        user = session.scalar(select(User).where(User.username == "browser_p1"))
        assert user.consent_at is not None
        messages = session.scalars(select(Message).where(Message.user_id == user.id).order_by(Message.id)).all()
        assert [(m.role, m.content) for m in messages if m.role == "user"] == [
            ("user", FIRST_MESSAGE), ("user", SECOND_MESSAGE)]
        assert [m.reply_to_id for m in messages if m.role == "assistant"] == [
            m.id for m in messages if m.role == "user"]
        answers = {a.item_id: a.value for a in session.scalars(
            select(QuestionnaireResponse).where(QuestionnaireResponse.user_id == user.id))}
        assert answers == chosen
        task = session.scalar(select(TaskSession).where(TaskSession.user_id == user.id, TaskSession.task_id == "T1"))
        assert task.status == "done"
        assert task.end_reason == "finished"


def test_language_switch_posts_the_choice_and_translates_the_page(new_page, live_server, bot):
    participant = bot()
    participant.register("browser_lang")
    page = new_page()
    sign_in(page, "browser_lang")
    expect(page.locator("h1")).to_have_text("我的任务")
    page.click("#language-toggle")
    expect(page.locator("h1")).to_have_text("My tasks")
    expect(page.locator(".task-card[data-task=T1] .badge")).to_have_text("Available")
    with live_server.runtime.db.Session() as session:
        assert session.scalar(select(User.language).where(User.username == "browser_lang")) == "en"


def test_reload_resumes_the_chat_and_the_page_moves_on_when_time_is_up(new_page, live_server, bot):
    bot().register("browser_timeup")
    page = new_page()
    sign_in(page, "browser_timeup")
    page.click(".task-card[data-task=T1] .start-task")
    page.fill("#message-input", "今天下雨了，我在家看书。")
    page.press("#message-input", "Enter")
    expect(page.locator(".msg.assistant:not(.pending)")).to_have_count(1)
    page.fill("#message-input", "这句还没发出去")

    page.reload()
    expect(page.locator(".msg.user .msg-text")).to_have_text(["今天下雨了，我在家看书。"])
    expect(page.locator(".msg.assistant")).to_have_count(1)
    expect(page.locator("#message-input")).to_have_value("这句还没发出去")

    # 900 study seconds are 9 real seconds here; the page asks the server and moves on by itself.
    expect(page.locator("form.questionnaire")).to_be_visible(timeout=15_000)
    expect(page.locator(".notice.info")).to_contain_text("对话时间已到")
    with live_server.runtime.db.Session() as session:
        user = session.scalar(select(User).where(User.username == "browser_timeup"))
        task = session.scalar(select(TaskSession).where(TaskSession.user_id == user.id))
        assert (task.phase, task.end_reason) == ("questionnaire", "time_up")
