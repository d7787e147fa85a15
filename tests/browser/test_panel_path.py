"""A panel participant's whole path in headless Chromium, in pilot mode:
enter through the panel link with an id, consent, do T1, see the completion code and the personal return
link; open the return link (in a fresh browser, no password) once T2 has unlocked and do T2; come back
through the panel link in a browser that entered as them before and land in the same account, without the
consent page; another browser with the same id gets the refusal page in its own language.

Its own live server: one study day lasts DAY_SECONDS real seconds, and PILOT_TIMER_SCALE with a 100 s minimum
keeps each task's minimum chat time at one second. T2 unlocks two study days after T1: the test moves T1's
completion back by those two days rather than waiting them out, so T2 has unlocked by the server's own rule
when the return link is opened.
"""
from __future__ import annotations

import re
from datetime import timedelta

import pytest
from playwright.sync_api import expect
from sqlalchemy import select

from database.models import Message, TaskSession, User
from tests.browser.conftest import browser_settings, page_factory, served
from tests.browser.test_participant_page import answer_questionnaire, assert_condition_hidden

pytestmark = pytest.mark.browser

DAY_SECONDS = 3.0  # T2 would unlock 2 study days = 6 real seconds after T1
TIMER_SCALE = 0.01  # a 900 s task lasts 9 real seconds, its 100 s minimum (set below) 1
PANEL_ID = "PANEL5f1a2b3c"
T1_CODE = "C1-WAVE-ONE"
T2_CODE = "C2-WAVE-TWO"


@pytest.fixture(scope="module")
def panel_server(tmp_path_factory, migrated_sqlite_template):
    from app import create_app

    settings = browser_settings(tmp_path_factory.mktemp("panel"), migrated_sqlite_template, day_seconds=DAY_SECONDS,
                                pilot_timer_scale=TIMER_SCALE, assignment_seed=11)
    settings.study = settings.study.with_overrides({"panel": {"id_parameter": "PROLIFIC_PID", "tasks": {
        "T1": {"completion_code": T1_CODE, "redirect_url": "https://panel.example.org/done?cc={completion_code}"},
        "T2": {"completion_code": T2_CODE},
    }}, "timing": {"min_participant_messages": 1, "min_active_seconds": 100}})  # one message, one second a task
    app = create_app(settings)
    for base_url in served(app, "panel-browser-server"):
        yield app, base_url


@pytest.fixture
def open_page(browser, panel_server):
    """A phone-sized page on the panel server (see conftest.page_factory)."""
    pages = page_factory(browser, panel_server[1])
    factory = next(pages)
    yield lambda: factory(width=390, height=844)
    next(pages, None)  # closes the contexts and fails on JavaScript errors


PASTE = """(() => {
  const box = document.querySelector("#message-input");
  const data = new DataTransfer();
  data.setData("text/plain", TEXT);
  box.dispatchEvent(new ClipboardEvent("paste", { clipboardData: data, bubbles: true, cancelable: true }));
})()"""


def do_task(page, text: str, *, pasted: str = "") -> None:
    """Chat (typed key by key, so the page measures it, and optionally a pasted part), finish after the
    minimum, answer the questionnaire."""
    expect(page.locator("#time-left")).to_have_text(re.compile(r"^\d+:\d\d$"))
    page.locator("#message-input").press_sequentially(text, delay=5)
    if pasted:
        page.evaluate(PASTE.replace("TEXT", repr(pasted)))  # the page counts what a paste brings in
        page.locator("#message-input").fill(text + pasted)
    page.press("#message-input", "Enter")
    expect(page.locator(".msg.assistant:not(.pending)")).to_have_count(1)
    expect(page.locator("#finish")).to_be_enabled(timeout=8_000)
    page.click("#finish")
    page.click("#finish-confirm")
    expect(page.locator("form.questionnaire")).to_be_visible()
    answer_questionnaire(page, skip="")
    page.click("#questionnaire-submit")


def test_panel_participant_enters_returns_by_link_and_comes_back_by_the_panel_link(open_page, panel_server):
    app, base_url = panel_server
    runtime = app.extensions["memory_lab"]

    # 1. the panel's link, with its id: consent, no password
    page = open_page()
    page.goto(f"/enter?PROLIFIC_PID={PANEL_ID}&STUDY_ID=s1&SESSION_ID=x9")
    expect(page.locator("h1")).to_have_text("知情同意")
    expect(page.locator(".panel-intro")).to_contain_text(PANEL_ID)
    page.click("#panel-continue")
    expect(page.get_by_role("alert")).to_contain_text("请先勾选同意")
    page.check("#consent-agree")
    page.click("#panel-continue")
    expect(page.locator(".task-card[data-task=T1]")).to_have_attribute("data-status", "available")
    expect(page.locator("#register-submit")).to_have_count(0)

    # 2. T1, then the completion code, the redirect to the panel and the personal return link
    page.click(".task-card[data-task=T1] .start-task")
    do_task(page, "Hello, I came from the panel and I like cycling.")
    expect(page.locator("#completion-code")).to_have_text(T1_CODE)
    expect(page.locator("#panel-redirect")).to_have_attribute("href", f"https://panel.example.org/done?cc={T1_CODE}")
    expect(page.locator("#next-task")).to_contain_text("T2")
    expect(page.locator("#next-task")).to_contain_text("解锁")
    expect(page.locator("#calendar-link")).to_have_attribute("href", "/api/me/next-task.ics")
    return_url = page.locator("#return-link").input_value()
    assert return_url.startswith(base_url + "/r/") and len(return_url) > len(base_url) + 40
    assert_condition_hidden(page)

    with runtime.db.Session() as session:
        user = session.scalar(select(User).where(User.external_id == PANEL_ID))
        code = user.participant_code
        t1 = session.scalar(select(TaskSession).where(TaskSession.user_id == user.id, TaskSession.task_id == "T1"))
        # as if T1 was done T2's unlock offset (two study days) ago
        t1.completed_at -= timedelta(days=runtime.study.task("T2").unlock_offset_days * runtime.settings.time_scale)
        session.commit()
        typed = session.scalar(select(Message).where(Message.user_id == user.id, Message.role == "user"))
        # the page measured the typing: keys pressed, time from the first key to sending, nothing pasted
        assert typed.keystrokes >= len("Hello, I came from the panel and I like cycling.") and typed.typing_ms > 0
        assert typed.pasted_chars == 0 and typed.focus_losses is not None

    # 3. after T2 unlocks: the return link in a fresh browser (no cookies, no password) opens T2
    returning = open_page()
    returning.goto(return_url)
    expect(returning).to_have_url(re.compile(r"/#/task/T2$"))
    expect(returning.locator("h1")).to_contain_text("T2")
    returning.click(".start-task")
    do_task(returning, "I rode out of town. ", pasted="这段话是从别的地方复制过来的。")
    expect(returning.locator("#completion-code")).to_have_text(T2_CODE)
    expect(returning.locator("#next-task")).to_contain_text("T3")

    # 4. the next wave's panel link in a browser that entered as this participant before (the return link
    #    bound it) lands in the same account, with no consent page
    returning.goto(f"/enter?PROLIFIC_PID={PANEL_ID}&STUDY_ID=s3&SESSION_ID=x10")
    expect(returning.locator(".task-card[data-task=T1]")).to_have_attribute("data-status", "done")
    expect(returning.locator(".task-card[data-task=T2]")).to_have_attribute("data-status", "done")
    expect(returning.locator("#consent-agree")).to_have_count(0)

    # 5. a browser that never entered as this participant, with the same id: the refusal page, no account
    stranger = open_page()
    stranger.goto(f"/enter?PROLIFIC_PID={PANEL_ID}")
    expect(stranger.locator("#panel-problem")).to_have_attribute("data-code", "panel_reentry_refused")
    expect(stranger.locator("h1")).to_have_text("无法在这里打开这个编号")
    expect(stranger.locator(".task-card")).to_have_count(0)
    with runtime.db.Session() as session:
        t2_message = session.scalar(select(Message).where(Message.task_id == "T2", Message.role == "user"))
        assert t2_message.pasted_chars == len("这段话是从别的地方复制过来的。")
        users = session.scalars(select(User).where(User.role == "participant")).all()
        assert [(u.external_id, u.participant_code) for u in users] == [(PANEL_ID, code)]
        done = session.scalars(select(TaskSession.task_id).where(TaskSession.status == "done")).all()
        assert sorted(done) == ["T1", "T2"]

    # a malformed id gets a clear page and no account
    bad = open_page()
    bad.goto("/enter?PROLIFIC_PID=%3Cscript%3E")
    expect(bad.get_by_role("alert")).to_contain_text("没有带有效的参与者编号")
