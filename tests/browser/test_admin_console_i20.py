"""The admin console as an admin meets it (issue 20, items 8-12): their own sign-in page in their language,
every word of the console in Chinese when the console is Chinese, a monitor that fits 1280x800 without a
sideways scroll, withdrawn participants' real task states, and plots that say they are drawing."""
from __future__ import annotations

import re
import time

import pytest
from playwright.sync_api import expect

from database.models import User
from tests.browser.conftest import page_factory

pytestmark = pytest.mark.browser

ENGLISH_WORDS = re.compile(r"\b(done|pending|failed|active|withdrawn|locked|task|attempt|status|phase)\b")


@pytest.fixture
def context_page(browser, live_server):
    """context_page(locale, width, height) -> a page in a fresh context with that browser language."""
    pages = page_factory(browser, live_server.base_url)
    factory = next(pages)
    yield lambda locale="zh-CN", width=1280, height=800: factory(width, height, locale=locale)
    next(pages, None)  # closes the contexts and fails on JavaScript errors


def sign_in(page, username: str, password: str) -> None:
    page.fill("#admin-login-username", username)
    page.fill("#admin-login-password", password)
    page.click("#admin-login-submit")


def test_admin_signs_in_on_their_own_page_in_the_browsers_language(context_page, admin_account, screenshot):
    page = context_page("en-US")
    page.goto("/admin")
    expect(page).to_have_url(re.compile(r"/admin/login\?next=/admin$"))
    screenshot(page, "admin_login_en")
    expect(page.locator("html")).to_have_attribute("lang", "en")
    expect(page.locator("h1")).to_have_text("Admin login")
    body = page.locator("body").inner_text()
    assert "register" not in body.lower() and "consent" not in body.lower() and "注册" not in body
    assert page.locator("a[href*='consent'], a[href*='register']").count() == 0

    page.click("#language-toggle")  # the toggle switches the page, and the console follows the choice
    expect(page.locator("h1")).to_have_text("管理员登录")
    expect(page.locator("html")).to_have_attribute("lang", "zh-CN")
    page.click("#language-toggle")
    expect(page.locator("h1")).to_have_text("Admin login")

    page.click("#admin-login-submit")
    expect(page.locator("#admin-login-error")).to_have_text("Please enter your username and password.")
    sign_in(page, admin_account[0], "wrong-password-1")
    expect(page.locator("#admin-login-error")).to_have_text("Wrong username or password.")
    sign_in(page, *admin_account)
    expect(page).to_have_url(re.compile(r"/admin#?/?(monitor)?$"))
    expect(page.locator("#participants")).to_be_visible(timeout=20_000)
    expect(page.locator("html")).to_have_attribute("lang", "en")

    page.click("#logout")
    expect(page).to_have_url(re.compile(r"/admin/login$"))

    chinese = context_page("zh-CN")
    chinese.goto("/admin")
    expect(chinese.locator("h1")).to_have_text("管理员登录")
    expect(chinese.locator("html")).to_have_attribute("lang", "zh-CN")


def _withdraw(live_server, user_id: int) -> None:
    with live_server.runtime.db.session() as session:
        user = session.get(User, user_id)
        user.status = "withdrawn"
        user.withdrawn_at = live_server.runtime.clock.now()


def _assert_fits(page) -> None:
    page_overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
    table_overflow = page.evaluate(
        "(() => { const w = document.querySelector('#participants').closest('.table-wrap');"
        " return w.scrollWidth - w.clientWidth; })()")
    assert page_overflow <= 0 and table_overflow <= 0, (page_overflow, table_overflow)
    for column in ("consolidation_pending", "quality", "provider_failures", "reminders", "task:T4"):
        box = page.locator(f"#participants th[data-col='{column}']").bounding_box()
        assert box and box["x"] + box["width"] <= 1280, column


def test_the_chinese_monitor_fits_1280_speaks_chinese_and_shows_withdrawn_states(
        context_page, live_server, admin_account, bot, screenshot):
    # participants in every state the monitor shows: available, chatting, withdrawn mid-chat, with a typed message
    waiting = bot()
    waiting.register("fit_waiting")
    chatting = bot()
    chatting.register("fit_chatting")
    chatting.start("T1")
    chatting.say("T1", "我每天早上六点起床，然后去公园跑步半个小时，回来以后再吃早饭。")
    finished = bot()
    finished.register("fit_finished_participant")
    started = time.monotonic()
    finished.start("T1")
    finished.say("T1", "Hello, I would like to talk about my weekend plans and my cat.")
    finished.finish_task("T1", started)
    leaving = bot()
    left = leaving.register("fit_leaving")["user"]
    leaving.start("T1")
    leaving.say("T1", "你好")
    _withdraw(live_server, left["id"])

    page = context_page("zh-CN", 1280, 800)
    page.goto("/admin")
    sign_in(page, *admin_account)
    row = page.locator(f"#participants tbody tr[data-id='{left['id']}']")
    expect(row).to_be_visible()
    expect(row.locator(".task-cell[data-task=T1]")).to_have_attribute("data-status", "withdrawn")
    expect(row.locator(".task-cell[data-task=T1]")).to_contain_text("已退出")
    expect(row.locator(".task-cell[data-task=T1]")).to_contain_text("退出时进行中（对话）")
    expect(row.locator(".task-cell[data-task=T2]")).to_contain_text("未开始")

    # no sideways scroll in either language: neither the page nor the table is wider than 1280 px
    # (before: the English monitor's table was 651 px wider than its frame)
    _assert_fits(page)
    screenshot(page, "admin_monitor_zh")
    page.click("#language-toggle")
    expect(page.locator("h1")).to_contain_text("Monitor")
    expect(page.locator("#participants td[data-col=consolidation_pending]").filter(has_text="T1: done")
           ).not_to_have_count(0)
    _assert_fits(page)
    screenshot(page, "admin_monitor_en")
    page.click("#language-toggle")
    expect(page.locator("h1")).to_contain_text("进度监控")
    # the hidden columns can be chosen
    page.click("#column-chooser summary")
    page.check("#column-last_active_at")
    expect(page.locator("#participants th[data-col=last_active_at]")).to_have_count(1)
    page.uncheck("#column-last_active_at")
    expect(page.locator("#participants th[data-col=last_active_at]")).to_have_count(0)

    # every word Chinese: status filter values, consolidation states, headers
    options = page.locator("#filter-status option").all_inner_texts()
    assert options == ["全部", "参与中", "已完成", "已退出", "已删除"], options
    headers = " ".join(page.locator("#participants thead th").all_inner_texts())
    assert not ENGLISH_WORDS.search(headers), headers

    # the withdrawn participant's record: only resettable tasks are offered, the others say why not, in Chinese
    page.goto(f"/admin#/participant/{left['id']}")
    expect(page.locator("#reset-form")).to_be_visible()
    assert page.locator("#reset-task option").all_inner_texts() == ["T1"]
    expect(page.locator("#reset-why-not li[data-task=T2]")).to_have_text("T2：这个任务还没有开始，无需重置")
    sessions_header = page.locator("table.data").first.locator("thead").inner_text()
    assert "任务" in sessions_header and not ENGLISH_WORDS.search(sessions_header), sessions_header


def test_plots_show_a_loading_state_then_the_chart_in_the_admins_language(context_page, admin_account, bot):
    participant = bot()
    participant.register("plot_answers")
    started = time.monotonic()
    participant.start("T1")
    participant.say("T1", "你好，我想聊聊周末的计划。")
    participant.finish_task("T1", started)  # one questionnaire: the means chart has data

    page = context_page("zh-CN")
    page.goto("/admin")
    sign_in(page, *admin_account)
    expect(page.locator("#participants")).to_be_visible(timeout=20_000)
    held = []
    page.route(re.compile(r"/plots/questionnaire_means\.png"), lambda route: held.append(route))  # held back
    page.click("nav a[data-route=plots]")
    figure = page.locator("figure[data-plot=questionnaire_means]")
    expect(figure).to_have_attribute("data-state", "loading")
    expect(figure).to_have_attribute("aria-busy", "true")
    expect(figure.locator(".plot-loading")).to_have_text("正在生成图表…")
    expect(figure.locator("img")).to_have_attribute("src", re.compile(r"lang=zh"))
    for _ in range(50):
        if held:
            break
        page.wait_for_timeout(100)
    held[0].continue_()
    expect(figure).to_have_attribute("data-state", "ready", timeout=30_000)
    expect(figure.locator(".plot-loading")).to_have_count(0)
    assert figure.locator("img").evaluate("img => img.naturalWidth") >= 1200  # two large panels a row
    width = figure.bounding_box()["width"]
    assert width > page.locator("figure[data-plot=funnel]").bounding_box()["width"] * 1.5  # spans the grid
