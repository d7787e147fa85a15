"""The admin console's pre-flight banner in headless Chromium: red while the manipulation is not verified,
green with the date, embedder and model once a passing report exists for this study definition."""
from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from database.models import PreflightReport
from services.research import preflight
from services.study import preflight_gate
from tests.browser.test_admin_page import log_in

pytestmark = pytest.mark.browser


def test_the_console_shows_the_preflight_state_at_the_top(new_page, live_server, admin_account):
    runtime = live_server.runtime
    with runtime.db.session() as session:
        had_reports = preflight_gate.latest_report(session) is not None
    page = new_page()
    page.goto("/#/login")  # the participants' login form also signs an admin in, then opens /admin
    log_in(page, *admin_account)
    banner = page.locator("#preflight-banner")
    if not had_reports:
        expect(banner.locator(".notice.error")).to_contain_text("操纵未验证")
        expect(banner.locator(".notice.ok")).to_have_count(0)

    with runtime.db.session() as session:  # what a passing `flask --app app preflight` stores
        session.add(PreflightReport(
            created_at=runtime.clock.now(), study_hash=preflight_gate.study_hash(runtime.study), passed=True,
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


def test_the_banner_names_the_failed_check_with_its_figures_and_next_step_in_both_languages(
        new_page, live_server, admin_account):
    # A stored report under issue 27's rule: the recall calibration has one target within error (pooled English T3,
    # 7 of 213 unrelated candidates) and one missed (pooled Chinese T2, 23 of 64); the bot check passed.
    from tests.services.research.test_calibration_rule import tasks
    from tests.services.research.test_preflight_rule import EMBEDDER, PASSING_BOTS, _checker, _outcomes, _probes_met

    runtime = live_server.runtime
    missed = _outcomes({("blind", "zh"): tasks(t2=(2, 32), t3=(9, 64), t4=(6, 68), who="blind-zh")})
    outcome = preflight.run_preflight(runtime.settings, runtime.db.session, make_app=None, clock=runtime.clock,
                                      embedder=EMBEDDER, check_preset=_checker(missed), simulate=PASSING_BOTS,
                                      check_probes=_probes_met, log_line=lambda line: None)
    assert not outcome.passed
    page = new_page()
    page.goto("/#/login")
    log_in(page, *admin_account)
    banner = page.locator("#preflight-banner")
    command = ".venv/bin/python scripts/calibrate_recall.py --embedder offline --fit --write-preset refit"
    expect(banner.locator(".notice.error").first).to_contain_text("预检未通过")
    expect(banner.locator(".notice.error").first).to_contain_text("回忆校准未通过")
    expect(banner).not_to_contain_text("机器人操纵检验未通过")
    expect(banner.locator(".notice.error", has_text="回忆校准：未通过")).to_have_count(1)
    expect(banner.locator(".notice.ok", has_text="机器人操纵检验：通过")).to_have_count(1)
    expect(banner.locator(".notice.warn", has_text="英文 T3 无关候选被回忆：3.3%（7/213；单侧 95% 区间 1.8%–6.0%；"
                                                   "目标 ≤ 3%）— 在误差范围内")).to_have_count(1)
    expect(banner.locator(".notice.error", has_text="中文 T2 相关记忆被回忆：35.9%（23/64；")).to_contain_text("未达标")
    expect(banner.locator(".notice.error", has_text="下一步")).to_contain_text(command)

    page.click("#language-toggle")
    expect(banner.locator(".notice.error").first).to_have_text(
        re.compile(r"^Pre-flight failed on .+: recall calibration failed$"))
    expect(banner).not_to_contain_text("manipulation check failed")
    expect(banner.locator(".notice.error", has_text="recall calibration: failed")).to_have_count(1)
    expect(banner.locator(".notice.ok", has_text="bot manipulation check: passed")).to_have_count(1)
    expect(banner.locator(".notice.warn", has_text="English T3 unrelated candidates recalled: 3.3% (7/213; one-sided "
                                                   "95% interval 1.8%–6.0%; target ≤ 3%) — within error")
           ).to_have_count(1)
    expect(banner.locator(".notice.error", has_text="Chinese T2 relevant memories recalled: 35.9% (23/64;")
           ).to_contain_text("— missed")
    expect(banner.locator(".notice.error", has_text="Next step: refit the preset")).to_contain_text(command)
    banner.locator("details.preflight-figures summary").click()
    expect(banner.locator("details.preflight-figures li[data-verdict='met']").first).to_contain_text("— met")
    page.click("#language-toggle")  # leave the admin's language as the other tests expect it
    expect(banner.locator(".notice.error").first).to_contain_text("预检未通过")
