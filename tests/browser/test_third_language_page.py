"""In the browser, a third language is one more catalog: with a dummy catalog dropped into the translations
folder, the admin sign-in page opens in it from the link's ``lang``, its language button reaches it, and its
words come from the catalog (untranslated ones in English). The language button names the next language in that
language's own words and tag, from its catalog; the participant page's button goes round the study's languages
only; the admin's failure log words a provider's try in the third language too."""
from __future__ import annotations

import dataclasses

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import ADMIN_PASSWORD, ADMIN_USERNAME, browser_settings, page_factory, served
from tests.pseudo_catalog import PSEUDO, UNTRANSLATED, pseudo, translations_with_a_third_language

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def pseudo_app(tmp_path_factory, migrated_sqlite_template):
    from app import create_app

    folder = tmp_path_factory.mktemp("third-language")
    settings = browser_settings(folder, migrated_sqlite_template)
    settings = dataclasses.replace(settings, translations_dir=str(translations_with_a_third_language(folder)))
    return create_app(settings)


@pytest.fixture(scope="module")
def pseudo_server(pseudo_app):
    yield from served(pseudo_app, "third-language-server")


@pytest.fixture
def pseudo_page(browser, pseudo_server):
    yield from page_factory(browser, pseudo_server)


# the page language is polled from Python (expect): wait_for_function evaluates a string, which the CSP forbids
def test_the_sign_in_page_speaks_a_language_that_is_only_a_catalog(pseudo_page):
    page = pseudo_page(locale="en-GB")
    page.goto(f"/admin/login?lang={PSEUDO}")
    expect(page.locator("html")).to_have_attribute("lang", PSEUDO)
    assert page.locator("#admin-login-title").inner_text() == "⟦Admin login⟧"
    assert page.locator("#admin-login-submit").inner_text() == "⟦Log in⟧"
    # a key the dummy catalog leaves out: English
    assert "⟦" not in page.locator(f"[data-i18n='{UNTRANSLATED[0]}']").inner_text()
    # the language button goes round every catalog: eo -> zh -> en -> eo, naming the next one in its own words
    toggle = page.locator("#language-toggle")
    expect(toggle).to_have_text("中文")
    expect(toggle).to_have_attribute("lang", "zh-CN")
    toggle.click()
    expect(page.locator("html")).to_have_attribute("lang", "zh-CN")
    assert page.locator("#admin-login-title").inner_text() == "管理员登录"
    expect(toggle).to_have_text("English")
    toggle.click()
    expect(page.locator("html")).to_have_attribute("lang", "en")
    expect(toggle).to_have_text(pseudo("English"))  # the dummy catalog's own name for its language
    expect(toggle).to_have_attribute("lang", PSEUDO)
    expect(toggle).to_have_attribute("aria-label", pseudo("Switch to English"))
    toggle.click()
    expect(page.locator("html")).to_have_attribute("lang", PSEUDO)
    assert page.locator("#admin-login-title").inner_text() == "⟦Admin login⟧"


def test_the_participant_page_s_button_goes_round_the_study_s_languages_only(pseudo_page):
    page = pseudo_page(locale="zh-CN")
    page.goto("/")
    expect(page.locator("html")).to_have_attribute("lang", "zh-CN")
    toggle = page.locator("#language-toggle")
    expect(toggle).to_have_text("English")
    expect(toggle).to_have_attribute("lang", "en")
    toggle.click()
    expect(page.locator("html")).to_have_attribute("lang", "en")
    expect(toggle).to_have_text("中文")
    expect(toggle).to_have_attribute("lang", "zh-CN")
    toggle.click()  # the study speaks zh and en: the dummy catalog is not offered to participants
    expect(page.locator("html")).to_have_attribute("lang", "zh-CN")


def test_the_failure_log_words_a_try_in_the_third_language(pseudo_app, pseudo_page):
    from database.models import ProviderFailure
    from services.participants.account_service import create_admin
    from services.platform.failure_log import failure_values

    runtime = pseudo_app.extensions["memory_lab"]
    with runtime.db.Session() as session:
        admin = create_admin(session, ADMIN_USERNAME, ADMIN_PASSWORD, runtime.clock)
        # the admin's account in the third language from the start (POST /api/auth/language keeps it too:
        # tests/routes/test_third_language.py)
        admin.language = PSEUDO
        session.add(ProviderFailure(**failure_values(
            {"provider": "dashscope", "model": "qwen-plus", "error_class": "server_error", "error": "HTTP 503: busy",
             "status_code": 503, "try": 1, "action": "retry", "retry_in_s": 0.5, "purpose": "reply"},
            runtime.clock.now())))
        session.commit()
    page = pseudo_page(locale="en-GB")
    page.goto(f"/admin/login?lang={PSEUDO}")
    page.fill("#admin-login-username", ADMIN_USERNAME)
    page.fill("#admin-login-password", ADMIN_PASSWORD)
    page.click("#admin-login-submit")
    expect(page.locator("#participants")).to_be_visible()
    page.goto("/admin#/failures")
    row = page.locator("table.data tbody tr", has_text="HTTP 503: busy")
    expect(row.locator("td").nth(7)).to_have_text(pseudo("try 1; retried after 0.5 s"))
    expect(row.locator("td").nth(8)).to_have_text("HTTP 503: busy")  # the provider's own text, as it came
