"""Participant rights in headless Chromium (issue 18 items 10-12, 14): the consent page shows the lab's
contact and a printable, downloadable copy of what was agreed; withdrawal with erasure goes through a
confirmation step and ends at the debrief; the debrief follows the last task; the IOS item's drawing.

Its own live server: the study unlocks T2-T4 right after the previous task (unlock offsets 0), and
PILOT_TIMER_SCALE and a 100 s minimum keep each task's minimum chat time at one second (four tasks are done
here; the minimum itself is tested in test_finish_dialog.py).
"""
from __future__ import annotations

import re
import time
from datetime import UTC, datetime

import pytest
from playwright.sync_api import expect
from sqlalchemy import select

from database.models import User
from tests.browser.conftest import HttpParticipant, browser_settings, page_factory, served
from tests.browser.test_participant_page import assert_condition_hidden

pytestmark = pytest.mark.browser

TIMER_SCALE = 0.01  # a 900 s task lasts 9 real seconds
MIN_ACTIVE_SECONDS = 100  # and its minimum 1 real second
PASSWORD = "rights-pass-1"
LINES = ["你好，我叫小周，喜欢骑车。", "最近在准备考试。", "周末想去海边走走。"]


@pytest.fixture(scope="module")
def rights_server(tmp_path_factory, migrated_sqlite_template):
    from app import create_app

    settings = browser_settings(tmp_path_factory.mktemp("rights"), migrated_sqlite_template, day_seconds=60.0,
                                pilot_timer_scale=TIMER_SCALE, assignment_seed=5)
    tasks = settings.study.as_dict()["tasks"]
    for task in tasks:
        task["unlock_offset_days"] = 0
    settings.study = settings.study.with_overrides(
        {"tasks": tasks, "timing": {"min_active_seconds": MIN_ACTIVE_SECONDS}})
    app = create_app(settings)
    for base_url in served(app, "rights-browser-server"):
        yield app, base_url


@pytest.fixture
def open_page(browser, rights_server):
    pages = page_factory(browser, rights_server[1], accept_downloads=True)
    factory = next(pages)
    yield lambda: factory(width=390, height=844)
    next(pages, None)  # closes the contexts and fails on JavaScript errors


def _register(page, username: str) -> None:
    page.goto("/")
    page.check("#consent-agree")
    page.click("#consent-continue")
    page.fill("#username", username)
    page.fill("#password", PASSWORD)
    page.fill("#password-repeat", PASSWORD)
    page.click("#register-submit")
    expect(page.locator(".task-card")).to_have_count(4)


def test_consent_page_shows_the_contact_and_a_working_printable_copy(open_page, rights_server, screenshot):
    app, _ = rights_server
    study = app.extensions["memory_lab"].study
    page = open_page()
    page.goto("/")
    expect(page.locator("#lab-contact")).to_contain_text(study.consent.contact["zh"])
    screenshot(page, "rights_consent_contact", full_page=True)
    agreed_on = datetime.now(UTC).date().isoformat()
    _register(page, "rights_copy")

    expect(page.locator("#rights #lab-contact")).to_contain_text(study.consent.contact["zh"])
    page.click("#consent-copy-link")
    expect(page).to_have_url(re.compile(r"/consent/copy\?lang=zh$"))
    expect(page.locator("#copy-text")).to_contain_text(study.consent.text["zh"])
    expect(page.locator("#copy-agreed-at")).to_contain_text(agreed_on)
    expect(page.locator("#copy-version")).to_have_text(study.consent.version)
    expect(page.locator("#copy-contact")).to_have_text(study.consent.contact["zh"])
    screenshot(page, "rights_consent_copy", full_page=True)
    page.evaluate("window.print = () => { window.printed = true; }")
    page.click("#print-copy")
    assert page.evaluate("window.printed") is True  # the button prints (a module script; the CSP has no inline)
    with page.expect_download() as download_info:
        page.click("#download-copy")
    download = download_info.value
    assert re.fullmatch(r"consent-[A-Za-z0-9]+-\d{4}-\d\d-\d\d\.html", download.suggested_filename)
    saved = open(download.path(), encoding="utf-8").read()
    assert study.consent.text["zh"] in saved and agreed_on in saved


def test_withdrawal_with_erasure_confirms_then_ends_at_the_debrief(open_page, rights_server, screenshot):
    app, _ = rights_server
    runtime = app.extensions["memory_lab"]
    page = open_page()
    _register(page, "rights_erase")
    with runtime.db.Session() as session:
        user = session.scalar(select(User).where(User.username == "rights_erase"))
        user_id, group = user.id, user.memory_group

    page.click("#withdraw-link")
    expect(page.locator("h1")).to_have_text("退出研究")
    page.click("#withdraw-continue")
    expect(page.get_by_role("alert")).to_contain_text("请先选择")
    page.check("#withdraw-erase")
    page.click("#withdraw-continue")
    expect(page.locator("#withdraw-confirm-box")).to_be_visible()
    expect(page.locator("#withdraw-confirm-text")).to_contain_text("无法撤销")
    screenshot(page, "rights_withdraw_confirm", full_page=True)
    with runtime.db.Session() as session:  # nothing happens before the confirmation
        assert session.get(User, user_id).status == "active"
    page.click("#withdraw-confirm")

    expect(page.locator("#debrief h1")).to_have_text(runtime.study.debrief.title["zh"])
    expect(page.locator("#debrief-group")).to_contain_text(runtime.study.debrief.by_condition[group]["zh"])
    expect(page.locator("#farewell-hint")).to_be_visible()
    screenshot(page, "rights_debrief_after_erasure", full_page=True)
    expect(page.locator("#logout")).to_be_hidden()
    assert page.request.get("/api/auth/me").status == 401  # the session has ended
    with runtime.db.Session() as session:
        erased = session.get(User, user_id)
        assert (erased.status, erased.withdrawn_by) == ("erased", "participant")
    page.reload()
    expect(page.locator("#consent-agree")).to_be_visible()  # logged out: back at the consent page


IOS_GEOMETRY = """() => [...document.querySelectorAll('.ios-option svg')].map((svg) => {
  const [self, other] = svg.querySelectorAll('circle');
  const [a, b] = [...svg.querySelectorAll('text')].map((t) => t.getBBox());
  return { distance: other.cx.baseVal.value - self.cx.baseVal.value,
           radii: self.r.baseVal.value + other.r.baseVal.value,
           labelGap: b.x - (a.x + a.width),
           labelTop: Math.min(a.y, b.y), circleBottom: self.cy.baseVal.value + self.r.baseVal.value };
})"""


def _finish_with_bot(bot: HttpParticipant, task_id: str) -> None:
    started = time.monotonic()
    bot.start(task_id)
    for line in LINES:
        bot.say(task_id, line)
    bot.finish_task(task_id, started)


def test_the_debrief_follows_the_last_task_and_the_ios_drawing_is_legible(open_page, rights_server, screenshot):
    app, base_url = rights_server
    runtime = app.extensions["memory_lab"]
    bot = HttpParticipant(base_url, runtime.study.timing.min_active_seconds * TIMER_SCALE)
    bot.register("rights_last", PASSWORD)
    for task_id in ("T1", "T2", "T3"):
        _finish_with_bot(bot, task_id)
    with runtime.db.Session() as session:
        group = session.scalar(select(User).where(User.username == "rights_last")).memory_group

    page = open_page()
    page.goto("/#/login")
    page.fill("#login-username", "rights_last")
    page.fill("#login-password", PASSWORD)
    page.click("#login-submit")
    page.click(".task-card[data-task=T4] .start-task")
    for line in LINES:
        page.fill("#message-input", line)
        page.press("#message-input", "Enter")
        expect(page.locator("#send")).to_be_enabled()
    expect(page.locator("#finish")).to_be_enabled(timeout=8_000)
    page.click("#finish")
    page.click("#finish-confirm")
    expect(page.locator("form.questionnaire")).to_be_visible()

    headings = page.locator("section.instrument h2").all_inner_texts()
    assert "关于这次对话" in headings and not any("检验" in h or "信任" in h for h in headings)
    screenshot(page, "rights_questionnaire", full_page=True)
    geometry = page.evaluate(IOS_GEOMETRY)
    assert len(geometry) == 7
    assert geometry[0]["distance"] > geometry[0]["radii"] + 6  # option 1: the circles stand clearly apart
    assert all(g["labelGap"] > 4 for g in geometry)  # the labels never touch, also at 6 and 7
    assert all(g["labelTop"] > g["circleBottom"] for g in geometry)  # and never cross a circle's outline

    for item in page.locator(".q-item").all():
        item_id, kind = item.get_attribute("data-item-id"), item.get_attribute("data-type")
        if kind in ("likert", "ios"):
            item.locator(f"label[for='q-{item_id}-4']").click()
        elif kind == "choice":
            item.locator(f"label[for='q-{item_id}-0']").click()
    page.click("#questionnaire-submit")

    expect(page.locator("#debrief h1")).to_have_text(runtime.study.debrief.title["zh"])
    expect(page.locator("#debrief .debrief-text")).to_contain_text("不记得")
    expect(page.locator("#debrief-group")).to_contain_text(runtime.study.debrief.by_condition[group]["zh"])
    screenshot(page, "rights_debrief_after_t4", full_page=True)
    page.click("#back-to-tasks")
    expect(page.locator("#debrief-link")).to_be_visible()  # it stays reachable
    page.click("#debrief-link")
    expect(page.locator("#debrief h1")).to_have_text(runtime.study.debrief.title["zh"])


def test_a_withdrawn_participant_is_told_so_not_that_the_task_is_not_ready(open_page, rights_server):
    page = open_page()
    _register(page, "rights_keep")
    page.click("#withdraw-link")
    page.check("#withdraw-keep")
    page.click("#withdraw-continue")
    page.click("#withdraw-confirm")
    expect(page.locator("#debrief h1")).to_be_visible()
    page.goto("/#/tasks")
    expect(page.locator("#withdrawn-notice")).to_contain_text("你已退出本研究")
    expect(page.locator("#withdraw-link")).to_have_count(0)
    page.goto("/#/task/T1")
    expect(page.locator("#task-state")).to_contain_text("你已退出本研究")
    assert_condition_hidden(page)
