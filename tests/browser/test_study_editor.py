"""The study editor in headless Chromium, in both languages (issue 29): a validation error shown beside its
field, editing an item and a task title, publishing with a reason, a participant registering afterwards seeing
the new text, an L4 preview whose T2 shows what L4 remembers of T1, and an axe-core scan of the editor.

The editor publishes, which changes the study for every later request, so these tests run on a server of
their own (a fresh SQLite database per language), not on the shared live server. Its study's minimum chat time
is 100 study seconds (1 real second), not the default's 300; a test that finishes a T1 moves its start back by
the minimum (conftest.minimum_time_behind) rather than waiting it out.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import (
    ADMIN_PASSWORD,
    ADMIN_USERNAME,
    browser_settings,
    minimum_time_behind,
    page_factory,
    served,
)
from tests.browser.test_accessibility import AXE, Scan

pytestmark = pytest.mark.browser

MIN_ACTIVE_SECONDS = 100
WORDING = {"zh": "这个助手真的听懂了我的话。", "en": "The assistant truly got what I said."}
TITLE = {"zh": "初次相识（新版）", "en": "First meeting, new wording"}


@pytest.fixture
def editor_server(tmp_path, migrated_sqlite_template):
    from app import create_app
    from services.participants.account_service import create_admin

    settings = browser_settings(tmp_path, migrated_sqlite_template, study_refresh_seconds=0.0)
    settings.study = settings.study.with_overrides({"timing": {"min_active_seconds": MIN_ACTIVE_SECONDS}})
    app = create_app(settings)
    runtime = app.extensions["memory_lab"]
    with runtime.db.Session() as session:
        create_admin(session, ADMIN_USERNAME, ADMIN_PASSWORD, runtime.clock)
    for base_url in served(app, "editor-test-server"):
        yield base_url, app


@pytest.fixture
def pages(browser, editor_server):
    yield from page_factory(browser, editor_server[0])


def _language_chosen_before(page, lang: str) -> None:
    """The reader chose ``lang`` on this browser before (localStorage, static/js/i18n.js): in place from the page's
    first load, as a first load, setting it and loading again would leave it, without that extra load. Only
    when nothing is stored yet, so a later choice on the page stands."""
    page.add_init_script(f"""try {{
        if (!localStorage.getItem('memorylab.language')) localStorage.setItem('memorylab.language', '{lang}');
    }} catch (error) {{}}""")


def _admin(page, lang: str):
    _language_chosen_before(page, lang)
    page.goto("/admin/login")
    page.fill("#admin-login-username", ADMIN_USERNAME)
    page.fill("#admin-login-password", ADMIN_PASSWORD)
    page.click("#admin-login-submit")
    expect(page).to_have_url(re.compile(r"/admin(#.*)?$"))
    expect(page.locator("#who")).not_to_have_text("")
    page.goto("/admin#/study")
    expect(page.locator("#study-save")).to_be_visible()


def _field(page, key: str):
    """The control (input, select, textarea) of the field named by its validation key."""
    return page.locator(f":is(input, select, textarea)[data-key='{key}']").first


@pytest.mark.parametrize("lang", ["zh", "en"])
def test_edit_validate_publish_and_a_newcomer_sees_it(pages, editor_server, lang, screenshot):
    page = pages(locale="zh-CN" if lang == "zh" else "en-US")
    _admin(page, lang)
    expect(page.locator("#study-live")).to_contain_text("v1")
    # a validation error, shown beside its field, in the admin's language
    page.click("#study-timing summary")
    minimum = _field(page, "timing.min_active_seconds")
    expect(minimum).to_have_value(str(MIN_ACTIVE_SECONDS))
    minimum.fill("99999")
    page.click("#study-save")
    problem = page.locator("[data-problem-for='timing.min_active_seconds']")
    expect(problem).to_contain_text("timing.min_active_seconds exceeds")
    expect(problem).to_contain_text("无法使用" if lang == "zh" else "Cannot be used")
    expect(minimum).to_have_attribute("aria-invalid", "true")
    expect(page.locator("#study-publish")).to_be_disabled()
    screenshot(page, f"study_editor_problem_{lang}")
    minimum.fill(str(MIN_ACTIVE_SECONDS))
    # edit an item (both languages side by side) and T1's title
    page.click("#study-instruments summary")
    page.click("[data-key='instruments.perceived_understanding'] > summary")
    _field(page, "instruments.perceived_understanding.items[0].text.zh").fill(WORDING["zh"])
    _field(page, "instruments.perceived_understanding.items[0].text.en").fill(WORDING["en"])
    _field(page, "tasks.T1.title.zh").fill(TITLE["zh"])
    _field(page, "tasks.T1.title.en").fill(TITLE["en"])
    # L4's two recall rules after the curve are switches of the memory section, on in the default study
    page.click("#study-memory summary")
    route = page.locator("input[data-key='memory.recall.rehearsal_route.enabled']")
    expect(route).to_be_checked()
    expect(page.locator("input[data-key='memory.recall.directed_retrieval.enabled']")).to_be_checked()
    route.uncheck()
    page.click("#study-save")
    expect(page.locator("#study-status")).to_contain_text("d1")
    expect(page.locator("[data-problem-for='timing.min_active_seconds']")).to_have_text("")
    page.click("#study-publish")
    expect(page.locator("#publish-dialog")).to_be_visible()
    page.fill("#publish-reason", "clearer wording")
    page.click("#publish-confirm")
    expect(page.locator("#study-status")).to_contain_text("v2")
    expect(page.locator("#study-live")).to_contain_text("v2")
    # the versions' diff names what changed
    page.click("#study-versions summary")
    page.select_option("#diff-from", "v1")
    page.select_option("#diff-to", "v2")
    page.click("#study-show-diff")
    expect(page.locator("#study-diff")).to_contain_text("tasks[0].title.en")
    expect(page.locator("#study-diff")).to_contain_text("instruments.perceived_understanding.items[0].text.zh")
    expect(page.locator("#study-diff")).to_contain_text("memory.recall.rehearsal_route.enabled")

    # a participant who registers afterwards sees the new title and, in the questionnaire, the new wording
    newcomer = pages(locale="zh-CN" if lang == "zh" else "en-US")
    _language_chosen_before(newcomer, lang)
    newcomer.goto("/")
    newcomer.check("#consent-agree")
    newcomer.click("#consent-continue")
    newcomer.fill("#username", f"newcomer_{lang}")
    newcomer.fill("#password", "browser-pass-1")
    newcomer.fill("#password-repeat", "browser-pass-1")
    newcomer.click("#register-submit")
    expect(newcomer.locator(".task-card[data-task=T1]")).to_contain_text(TITLE[lang])
    api = newcomer.request
    token = api.get("/api/auth/csrf").json()["csrf_token"]
    headers = {"X-CSRFToken": token}
    assert api.post("/api/tasks/T1/start", headers=headers).status == 201
    assert api.post("/api/tasks/T1/messages", headers=headers, data={"content": "hello"}).status == 201
    minimum_time_behind(editor_server[1].extensions["memory_lab"], api.get("/api/auth/me").json()["user"]["id"], "T1")
    assert api.post("/api/tasks/T1/finish", headers=headers).status == 200
    items = api.get("/api/tasks/T1/questionnaire").json()["items"]
    assert next(i for i in items if i["id"] == "pu_1")["text"] == WORDING[lang]


@pytest.mark.parametrize("lang", ["zh", "en"])
def test_an_l4_preview_at_t2_shows_what_l4_remembers(pages, editor_server, lang):
    page = pages(locale="zh-CN" if lang == "zh" else "en-US")
    _admin(page, lang)
    page.select_option("#preview-condition", "L4")
    page.select_option("#preview-task", "T1")
    page.select_option("#preview-language", lang)
    page.click("#open-preview")
    link = page.locator("#preview-link").get_attribute("href")
    preview = pages(locale="zh-CN" if lang == "zh" else "en-US")  # a private window: its own cookies
    preview.goto(link)
    preview.click("button.start-task")
    expect(preview.locator("#message-input")).to_be_visible()
    fact = {"zh": "我妹妹下个月在青岛结婚，我对海鲜过敏。",
            "en": "My sister marries in Porto next month and I am allergic to shellfish."}
    preview.fill("#message-input", fact[lang])
    preview.press("#message-input", "Enter")
    expect(preview.locator(".msg.assistant:not(.pending) .msg-text").first).not_to_have_text("")
    api = preview.request
    headers = {"X-CSRFToken": api.get("/api/auth/csrf").json()["csrf_token"]}
    minimum_time_behind(editor_server[1].extensions["memory_lab"], api.get("/api/auth/me").json()["user"]["id"], "T1")
    assert api.post("/api/tasks/T1/finish", headers=headers).status == 200
    items = api.get("/api/tasks/T1/questionnaire").json()["items"]
    answers = {i["id"]: (i["min"] if i["type"] in ("likert", "ios") or (i["type"] == "attention" and not i["options"])
                         else i["options"][0]["value"] if i["options"] else "ok") for i in items}
    assert api.post("/api/tasks/T1/questionnaire", headers=headers, data={"answers": answers}).status == 201
    # T2 opens at once for a preview; L4 brings back what was said in T1
    preview.goto("/#/tasks")
    preview.reload()
    expect(preview.locator(".task-card[data-task=T2] .start-task")).to_be_visible()
    preview.click(".task-card[data-task=T2] .start-task")
    question = {"zh": "你还记得我告诉过你什么吗？", "en": "Do you remember what I told you?"}
    preview.fill("#message-input", question[lang])
    preview.press("#message-input", "Enter")
    reply = preview.locator(".msg.assistant:not(.pending) .msg-text").last
    expect(reply).to_contain_text("海鲜" if lang == "zh" else "shellfish", timeout=15_000)
    # the monitor's groups count no preview
    monitor = page.request.get("/api/admin/participants").json()
    assert sum(monitor["summary"]["groups"].values()) == 0


def test_the_editor_has_no_serious_accessibility_violation(pages, editor_server):
    if not Path(AXE).exists():
        pytest.skip(f"axe-core is not installed at {AXE}")
    scan = Scan(Path(AXE).read_text(encoding="utf-8"))
    for lang in ("zh", "en"):
        page = pages(locale="zh-CN" if lang == "zh" else "en-US")
        _admin(page, lang)
        scan(page, f"{lang}: study editor")
        page.click("#study-timing summary")
        _field(page, "timing.min_active_seconds").fill("99999")
        page.click("#study-instruments summary")
        page.click("[data-key='instruments.perceived_understanding'] > summary")
        page.click("#study-save")
        expect(page.locator("[data-problem-for='timing.min_active_seconds']")).not_to_have_text("")
        scan(page, f"{lang}: study editor with a problem")
        page.click("#study-versions summary")
        scan(page, f"{lang}: study editor versions")
    scan.assert_clean()
