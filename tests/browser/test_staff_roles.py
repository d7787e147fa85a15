"""Lab staff in headless Chromium: the owner invites a viewer from the console, the viewer sets a password
through the one-time link, signs in at the usual admin login, and can neither see nor use the export."""
from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from tests.browser.test_accessibility import Scan, axe_source  # noqa: F401 - axe_source is a fixture

pytestmark = pytest.mark.browser
TEXTS = {"zh-CN": {"button": "团队成员", "invite": "邀请"}, "en-US": {"button": "Staff", "invite": "Invite"}}


def sign_in(page, username: str, password: str) -> None:
    page.goto("/admin/login")
    page.fill("#admin-login-username", username)
    page.fill("#admin-login-password", password)
    page.click("#admin-login-submit")
    expect(page).to_have_url(re.compile(r"/admin(#/?(monitor)?)?$"))
    expect(page.locator("#participants")).to_be_visible()


@pytest.mark.parametrize("locale", ["zh-CN", "en-US"])
def test_an_invited_viewer_cannot_export(new_page, admin_account, axe_source, locale):  # noqa: F811
    scan = Scan(axe_source)
    make = new_page
    owner = make(locale=locale)
    sign_in(owner, *admin_account)
    if (owner.evaluate("document.documentElement.lang") or "").startswith("zh") != locale.startswith("zh"):
        owner.click("#language-toggle")
    expect(owner.locator("nav a[data-route=export]")).to_be_visible()
    owner.click("#staff-button")
    expect(owner.locator("#staff-button")).to_have_text(TEXTS[locale]["button"])
    name = f"viewer_{locale[:2]}"
    owner.fill("#staff-username", name)
    owner.select_option("#staff-role", "viewer")
    owner.click("#staff-invite")
    link = owner.locator("#staff-link")
    expect(link).to_contain_text("/staff/accept/")
    url = link.inner_text()
    scan(owner, "staff panel with an invitation link")

    invitee = make(locale=locale)
    invitee.goto(url.replace(re.match(r"https?://[^/]+", url).group(0), ""))
    scan(invitee, "staff invitation page")
    invitee.fill("#staff-accept-password", "a-long-staff-passphrase-7")
    invitee.click("#staff-accept-submit")
    expect(invitee.locator("#staff-accept-login")).to_be_visible()
    owner.click("#staff-button")  # closed, then opened again: the panel reads the members anew
    owner.click("#staff-button")
    expect(owner.locator(f"#staff-panel tr[data-staff={name}]")).to_be_visible()
    sign_in(invitee, name, "a-long-staff-passphrase-7")
    expect(invitee.locator("body")).to_have_class(re.compile(r"\blacks-export\b"))
    expect(invitee.locator("nav a[data-route=export]")).to_be_hidden()
    status = invitee.evaluate("fetch('/api/admin/export', {headers: {Accept: 'application/json'}}).then(r => r.status)")
    assert status == 403
    invitee.click("#staff-button")
    expect(invitee.locator("#staff-invite-form")).to_have_count(0)  # only an owner manages staff
    expect(invitee.locator("#staff-totp-setup")).to_be_visible()
    # the monitor polls on both open consoles here, so "networkidle" (which Scan waits for) may never come
    invitee.wait_for_load_state = lambda *_args, **_kwargs: None
    scan(invitee, "a viewer's console with the staff panel")
    scan.assert_clean()
