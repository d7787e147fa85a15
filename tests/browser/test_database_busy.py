"""Issue 11, item 7, in the browser: when the server answers 503 "database_busy" (nothing was saved),
the participant's text stays in the box and the page sends it again by itself; and (issue 19) when the
message was stored but its reply failed, the page asks for the reply again after the server's wait."""
from __future__ import annotations

import json

import pytest
from playwright.sync_api import expect
from sqlalchemy import select

from database.models import Message, User
from services.llm.chain import LLMService
from tests.browser.conftest import sign_in
from tests.model_doubles import DownModel

pytestmark = pytest.mark.browser
TEXT = "数据库忙的时候这句话也不能丢。"


def busy_once(refused: list[str]):
    """A route handler that answers the first POST 503 "database_busy" with a 1-s Retry-After (noting its
    URL in ``refused``) and lets everything else through."""

    def handle(route):
        if refused or route.request.method != "POST":
            route.continue_()
            return
        refused.append(route.request.url)
        route.fulfill(status=503, content_type="application/json", headers={"Retry-After": "1"},
                      body=json.dumps({"error": "database_busy", "retryable": True,
                                       "message": "the database is busy; NOT saved",
                                       "details": {"retry_after_seconds": 1}}))

    return handle


def test_a_busy_database_keeps_the_text_and_the_page_retries(new_page, live_server, bot):
    bot().register("browser_busy")
    page = new_page()
    sign_in(page, "browser_busy")
    page.click(".task-card[data-task=T1] .start-task")

    refused: list[str] = []
    page.route("**/api/tasks/T1/messages*", busy_once(refused))
    page.fill("#message-input", TEXT)
    page.press("#message-input", "Enter")
    expect(page.locator(".composer .notice")).to_contain_text("正在自动重试")
    expect(page.locator("#message-input")).to_have_value(TEXT)

    expect(page.locator(".msg.user .msg-text")).to_have_text([TEXT])
    expect(page.locator(".msg.assistant:not(.pending)")).to_have_count(1)
    expect(page.locator("#message-input")).to_have_value("")
    expect(page.locator(".composer .notice")).to_have_text("")
    assert len(refused) == 1
    with live_server.runtime.db.Session() as session:
        user_id = session.scalar(select(User.id).where(User.username == "browser_busy"))
        assert session.scalars(select(Message.content).where(Message.user_id == user_id,
                                                             Message.role == "user")).all() == [TEXT]


def test_a_reply_that_failed_is_asked_for_again_by_the_page(new_page, live_server, bot):
    """Back-pressure after the message is stored: the stream's error event says when to ask again, and the
    page does, by itself, without losing the message or storing it twice."""
    bot().register("browser_reply_retry")
    page = new_page()
    sign_in(page, "browser_reply_retry")
    page.click(".task-card[data-task=T1] .start-task")

    runtime = live_server.runtime
    working = runtime.llm
    runtime.llm = LLMService([DownModel()], on_failure=runtime.record_failure)
    try:
        page.fill("#message-input", "助手没回的时候，这句话也要等到回复。")
        page.press("#message-input", "Enter")
        expect(page.locator(".msg.user .msg-failed")).to_contain_text("秒后自动再问一次")
    finally:
        runtime.llm = working
    expect(page.locator(".msg.assistant:not(.pending)")).to_have_count(1, timeout=20_000)
    expect(page.locator(".msg-failed")).to_have_count(0)
    with runtime.db.Session() as session:
        user_id = session.scalar(select(User.id).where(User.username == "browser_reply_retry"))
        roles = session.scalars(select(Message.role).where(Message.user_id == user_id).order_by(Message.id)).all()
    assert roles == ["user", "assistant"]


def test_a_task_start_refused_for_now_is_tried_again_by_the_page(new_page, live_server, bot):
    """A whole class opening T1 at once: a start answered 503 with Retry-After is asked again after the wait."""
    bot().register("browser_start_busy")
    page = new_page()
    sign_in(page, "browser_start_busy")
    refused: list[str] = []
    page.route("**/api/tasks/T1/start", busy_once(refused))
    page.click(".task-card[data-task=T1] .start-task")
    expect(page.locator("#message-input")).to_be_visible(timeout=15_000)
    assert len(refused) == 1
