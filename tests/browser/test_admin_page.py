"""The admin console in headless Chromium, and a participant kept out of it.

The admin logs in through the page, watches the monitor update by itself while a bot participant
(real HTTP against the same live server) does T1, opens that participant, expands a reply's memory
context, filters and sorts, withdraws a participant with a reason, and downloads an export.
"""
from __future__ import annotations

import csv
import io
import re
import time
import zipfile

import pytest
from playwright.sync_api import expect
from sqlalchemy import select

from database.models import AuditLog, User

pytestmark = pytest.mark.browser

BOT_MESSAGE = "我叫阿明，是一名护士，家里养了一只叫豆豆的猫。"


def log_in(page, username: str, password: str) -> None:
    page.fill("#login-username", username)
    page.fill("#login-password", password)
    page.click("#login-submit")


def funnel_count(page, key: str) -> int:
    return int(page.locator(f"#summary [data-funnel='{key}'] .count").inner_text())


def test_admin_monitor_follows_a_bot_and_shows_the_memory_context(new_page, live_server, admin_account, bot,
                                                                   screenshot):
    page = new_page()
    page.goto("/admin")
    expect(page).to_have_url(re.compile(r"/admin/login\?next=/admin$"))
    page.fill("#admin-login-username", admin_account[0])
    page.fill("#admin-login-password", admin_account[1])
    page.click("#admin-login-submit")
    expect(page).to_have_url(re.compile(r"/admin#?/?$|/admin#/monitor$"))
    expect(page.locator("#participants")).to_be_visible()
    expect(page.locator("#updated")).to_have_text(re.compile(r"\d{2}:\d{2}:\d{2}"))
    page.evaluate("window.__sameDocument = true")

    participant = bot()
    user = participant.register("bot_monitor")["user"]
    row = page.locator(f"#participants tbody tr[data-id='{user['id']}']")
    expect(row).to_be_visible(timeout=10_000)
    expect(row.locator(".task-cell[data-task=T1]")).to_have_attribute("data-status", "available")
    done_before = funnel_count(page, "T1")

    started = time.monotonic()
    participant.start("T1")
    participant.say("T1", BOT_MESSAGE)
    expect(row.locator(".task-cell[data-task=T1]")).to_have_attribute("data-status", "in_progress", timeout=10_000)
    participant.finish_task("T1", started)
    expect(row.locator(".task-cell[data-task=T1]")).to_have_attribute("data-status", "done", timeout=10_000)
    expect(row.locator("td[data-col=messages]")).to_have_text("2")
    page.click("#column-chooser summary")  # hidden by default so the monitor fits 1280 px; chosen here
    page.check("#column-questionnaires_done")
    expect(row.locator("td[data-col=questionnaires_done]")).to_have_text("1")
    expect(page.locator("#summary [data-funnel='T1'] .count")).to_have_text(str(done_before + 1))
    assert page.evaluate("window.__sameDocument") is True, "the monitor reloaded the page"
    screenshot(page, "admin_monitor_live_update")

    with live_server.runtime.db.Session() as session:
        group = session.get(User, user["id"]).memory_group
    page.select_option("#filter-group", group)
    expect(page.locator("#participants tbody tr")).not_to_have_count(0)
    for shown in page.locator("#participants tbody tr").all():
        expect(shown).to_have_attribute("data-group", group)
    page.select_option("#filter-group", "")

    code_header = page.locator("#participants th[data-col=participant_code]")
    code_header.locator("button").click()
    expect(code_header).to_have_attribute("aria-sort", "ascending")
    codes = _codes_once_settled(page)
    assert codes == sorted(codes)
    code_header.locator("button").click()
    expect(code_header).to_have_attribute("aria-sort", "descending")

    row.locator("td[data-col=participant_code] a").click()
    expect(page.locator("h1")).to_contain_text(user["participant_code"])
    panel = page.locator(".task-block[data-task=T1] details.context").first
    expect(panel.locator(".context-body")).to_be_hidden()
    panel.locator(":scope > summary").click()
    body = panel.locator(".context-body")
    expect(body).to_be_visible()
    expect(panel.locator(":scope > summary")).to_contain_text("offline")
    expect(body.locator("[data-section=group]")).to_contain_text(group)
    expect(body.locator("[data-section=profile]")).to_be_visible()
    expect(body.locator("[data-section=recent_turns]")).to_be_visible()
    expect(body.locator("[data-section=recalled]")).to_be_visible()
    body.locator("details.prompt summary").click()
    expect(body.locator("details.prompt")).to_contain_text(BOT_MESSAGE)
    screenshot(page, "admin_participant_detail", full_page=True)

    page.click("nav a[data-route=export]")
    page.check("#export-bom")
    with page.expect_download() as download_info:
        page.click("#export-link")
    download = download_info.value
    assert download.failure() is None
    assert download.suggested_filename.endswith(".zip")
    with zipfile.ZipFile(download.path()) as archive:
        names = set(archive.namelist())
        assert {"participants.csv", "messages.csv", "codebook.csv"} <= names
        raw = archive.read("messages.csv")
    assert raw.startswith(b"\xef\xbb\xbf"), "the BOM option was not applied"
    rows = list(csv.DictReader(io.StringIO(raw.decode("utf-8-sig"))))
    assert BOT_MESSAGE in {r.get("text") or r.get("content") for r in rows}


def test_admin_withdraws_a_participant_with_a_reason(new_page, live_server, admin_account, bot):
    participant = bot()
    user = participant.register("bot_withdraw")["user"]
    page = new_page()
    page.goto("/#/login")
    log_in(page, *admin_account)
    expect(page.locator("#participants")).to_be_visible()
    page.goto(f"/admin#/participant/{user['id']}")
    expect(page.locator("h1")).to_contain_text(user["participant_code"])
    page.click("#action-withdraw")
    expect(page.locator("#actions .notice")).to_contain_text("请填写原因")
    page.fill("#withdraw-reason", "asked to stop by e-mail")
    page.click("#action-withdraw")
    expect(page.locator(".facts [data-status]")).to_have_attribute("data-status", "withdrawn")
    expect(page.locator(".facts")).to_contain_text("已退出")
    expect(page.locator("#action-withdraw")).to_be_disabled()
    with live_server.runtime.db.Session() as session:
        assert session.scalar(select(User.status).where(User.id == user["id"])) == "withdrawn"
        audit = session.scalar(select(AuditLog).where(AuditLog.target_user_id == user["id"],
                                                      AuditLog.action == "participant_withdrawn"))
        assert audit.details["reason"] == "asked to stop by e-mail"


def test_failures_and_plots_views_render(new_page, live_server, admin_account, bot):
    participant = bot()
    participant.register("bot_plots")
    live_server.replies.failing.set()
    try:
        participant.start("T1")
        status, body = participant.request("POST", "/api/tasks/T1/messages", {"content": "你好"})
    finally:
        live_server.replies.failing.clear()
    assert (status, body["error"]) == (503, "provider_unavailable")

    page = new_page()
    page.goto("/#/login")
    log_in(page, *admin_account)
    expect(page.locator("#participants")).to_be_visible()
    page.click("nav a[data-route=failures]")
    expect(page.locator("h1")).to_contain_text("模型调用失败记录")
    expect(page.locator("table.data").last).to_contain_text("switched off by the browser test")

    page.click("nav a[data-route=plots]")
    expect(page.locator(".plots figure img")).to_have_count(4)
    funnel = page.locator("figure[data-plot=funnel] img")
    expect(funnel).to_have_attribute("src", re.compile(r"/api/admin/plots/funnel\.png"))
    # polled from here: wait_for_function evaluates a string in the page, which the CSP (no eval) forbids
    for _ in range(100):
        if funnel.evaluate("img => img.naturalWidth") > 0:
            break
        page.wait_for_timeout(100)
    assert funnel.evaluate("img => img.naturalWidth") > 0
    expect(page.locator("#forgetting-curve img, #forgetting-curve p")).to_have_count(1)


def test_participant_cannot_open_the_admin_console(new_page, live_server, bot):
    bot().register("nosy_participant", password="nosy-password-1")
    page = new_page()
    page.goto("/#/login")
    log_in(page, "nosy_participant", "nosy-password-1")
    expect(page.locator("h1")).to_have_text("我的任务")

    page.goto("/admin")
    expect(page).not_to_have_url(re.compile(r"/admin"))
    expect(page.locator("h1")).to_have_text("我的任务")
    expect(page.locator("#participants")).to_have_count(0)
    assert "bot_monitor" not in page.content()
    for path in ("/api/admin/participants", "/api/admin/export", "/api/admin/plots/funnel.png"):
        assert page.request.get(path).status == 403, path
    fetched = page.evaluate("fetch('/api/admin/participants').then(r => r.status)")
    assert fetched == 403


def _codes_once_settled(page, seconds: float = 5.0) -> list[str]:
    """The codes in the table once a re-render that was already in flight (the filter just cleared,
    the 3 s poll) has landed: read until they come out sorted or the time is up, then let the caller
    assert. Polled from Python because the CSP forbids the eval that wait_for_function needs."""
    cells = page.locator("#participants tbody td[data-col=participant_code]")
    deadline = time.monotonic() + seconds
    codes = cells.all_inner_texts()
    while codes != sorted(codes) and time.monotonic() < deadline:
        page.wait_for_timeout(100)
        codes = cells.all_inner_texts()
    return codes
