"""In the browser, a third language is one more catalog: with a dummy catalog dropped into the translations
folder, the admin sign-in page opens in it from the link's ``lang``, its language button reaches it, and its
words come from the catalog (untranslated ones in English)."""
from __future__ import annotations

import dataclasses

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import browser_settings, page_factory, served
from tests.pseudo_catalog import PSEUDO, UNTRANSLATED, translations_with_a_third_language


@pytest.fixture(scope="module")
def pseudo_server(tmp_path_factory, migrated_sqlite_template):
    from app import create_app

    folder = tmp_path_factory.mktemp("third-language")
    settings = browser_settings(folder, migrated_sqlite_template)
    settings = dataclasses.replace(settings, translations_dir=str(translations_with_a_third_language(folder)))
    yield from served(create_app(settings), "third-language-server")


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
    # the language button goes round every catalog: eo -> zh -> en -> eo
    toggle = page.locator("#language-toggle")
    toggle.click()
    expect(page.locator("html")).to_have_attribute("lang", "zh-CN")
    assert page.locator("#admin-login-title").inner_text() == "管理员登录"
    toggle.click()
    expect(page.locator("html")).to_have_attribute("lang", "en")
    toggle.click()
    expect(page.locator("html")).to_have_attribute("lang", PSEUDO)
    assert page.locator("#admin-login-title").inner_text() == "⟦Admin login⟧"
