"""The admin console's pre-flight banner in headless Chromium: red while the manipulation is not verified,
green with the date, embedder and model once a passing report exists for this study definition."""
from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from database.models import PreflightReport
from services.research import preflight
from tests.browser.test_admin_page import log_in

pytestmark = pytest.mark.browser


def test_the_console_shows_the_preflight_state_at_the_top(new_page, live_server, admin_account):
    runtime = live_server.runtime
    with runtime.db.session() as session:
        had_reports = preflight.latest_report(session) is not None
    page = new_page()
    page.goto("/#/login")  # the participants' login form also signs an admin in, then opens /admin
    log_in(page, *admin_account)
    banner = page.locator("#preflight-banner")
    if not had_reports:
        expect(banner.locator(".notice.error")).to_contain_text("操纵未验证")
        expect(banner.locator(".notice.ok")).to_have_count(0)

    with runtime.db.session() as session:  # what a passing `flask --app app preflight` stores
        session.add(PreflightReport(
            created_at=runtime.clock.now(), study_hash=preflight.study_hash(runtime.study), passed=True,
            embedder_model=runtime.embedder.model, chat_model="offline/offline-template-responder",
            providers={"embedder": runtime.embedder.model, "reply": ["offline/offline-template-responder"]},
            checks={"calibration": {"verdict": "passed", "passed": True},
                    "manipulation": {"verdict": "passed", "passed": True, "failed_checks": []}},
            duration_seconds=60.0))
    page.reload()
    green = banner.locator(".notice.ok")
    expect(green).to_contain_text("操纵已验证")
    expect(green).to_contain_text(runtime.embedder.model)
    expect(green).to_contain_text("offline/offline-template-responder")
    expect(banner.locator(".notice.error")).to_have_count(0)
    page.click("#language-toggle")
    expect(green).to_have_text(re.compile(r"^Manipulation verified on .+ for this study definition with "
                                          + re.escape(runtime.embedder.model)))
    page.click("#language-toggle")  # leave the admin's language as the other tests expect it
    expect(banner.locator(".notice.ok")).to_contain_text("操纵已验证")
