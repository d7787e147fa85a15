"""Issue 28 item 14: the participant page opens in the reader's language: an explicit ``lang`` in the link, then
the browser's languages among those the study offers, then the study's ``default_language``; the account keeps
the last explicit choice, and a switch made on the login page is not overridden by the account's older one."""
from __future__ import annotations

import pytest
from playwright.sync_api import expect
from sqlalchemy import select

from database.models import User
from tests.browser.conftest import browser_settings, page_factory, served

pytestmark = pytest.mark.browser


def test_an_english_browser_opens_the_consent_page_in_english(new_page):
    page = new_page(locale="en-US")
    page.goto("/")
    expect(page.locator("h1")).to_have_text("Informed consent")
    expect(page.locator("html")).to_have_attribute("lang", "en")
    expect(page.locator("#consent-continue")).to_have_text("Agree and register")


def test_a_chinese_browser_opens_the_consent_page_in_chinese(new_page):
    page = new_page(locale="zh-CN")
    page.goto("/")
    expect(page.locator("h1")).to_have_text("知情同意")
    expect(page.locator("html")).to_have_attribute("lang", "zh-CN")


def test_the_link_s_lang_comes_before_the_browser_s_languages(new_page):
    page = new_page(locale="zh-CN")
    page.goto("/?lang=en")
    expect(page.locator("h1")).to_have_text("Informed consent")
    page = new_page(locale="en-GB")
    page.goto("/enter?pid=langlink0001&lang=zh")
    expect(page.locator("h1")).to_have_text("知情同意")


def test_a_browser_language_the_study_does_not_offer_gets_the_study_default(new_page):
    page = new_page(locale="de-DE")  # the default study's default_language is zh
    page.goto("/")
    expect(page.locator("h1")).to_have_text("知情同意")


def test_a_switch_on_the_login_page_wins_over_the_account_s_older_language_and_is_kept(new_page, live_server, bot):
    bot().register("lang_switcher")  # registered without a language: the study's default, zh
    page = new_page(locale="zh-CN")
    page.goto("/#/login")
    expect(page.locator("h1")).to_have_text("登录")
    page.click("#language-toggle")
    expect(page.locator("h1")).to_have_text("Log in")
    page.fill("#login-username", "lang_switcher")
    page.fill("#login-password", "bot-password-1")
    page.click("#login-submit")
    expect(page.locator("h1")).to_have_text("My tasks")
    page.wait_for_timeout(300)  # any late switch back would show by now
    expect(page.locator("h1")).to_have_text("My tasks")
    with live_server.runtime.db.Session() as session:
        assert session.scalar(select(User.language).where(User.username == "lang_switcher")) == "en"

    # another browser, a Chinese one, with no choice made there: the account's last explicit choice
    other = new_page(locale="zh-CN")
    other.goto("/#/login")
    other.fill("#login-username", "lang_switcher")
    other.fill("#login-password", "bot-password-1")
    other.click("#login-submit")
    expect(other.locator("h1")).to_have_text("My tasks")


@pytest.fixture(scope="module")
def english_study_server(tmp_path_factory, migrated_sqlite_template):
    from app import create_app

    settings = browser_settings(tmp_path_factory.mktemp("english"), migrated_sqlite_template, assignment_seed=5)
    settings.study = settings.study.with_overrides({"default_language": "en"})
    app = create_app(settings)
    yield from served(app, "english-study-server")


def test_a_study_with_english_as_default_opens_in_english_for_a_browser_it_does_not_speak(
        browser, english_study_server):
    pages = page_factory(browser, english_study_server)
    factory = next(pages)
    page = factory(locale="fr-FR")
    page.goto("/")
    expect(page.locator("h1")).to_have_text("Informed consent")
    expect(page.locator("html")).to_have_attribute("lang", "en")
    chinese = factory(locale="zh-TW")  # the browser's language, offered by the study, comes before the default
    chinese.goto("/")
    expect(chinese.locator("h1")).to_have_text("知情同意")
    next(pages, None)
