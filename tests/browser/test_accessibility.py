"""An accessibility scan of every participant page and the admin console in the real browser (issue 20).

axe-core (npm, installed by scripts/install_test_deps.sh into the untracked .cache/axe; nothing is
downloaded here) is injected into each page as it is, in the state a participant or an admin meets it:
with errors shown, a reply that failed, a questionnaire with problems marked. The participant pages are
scanned at a phone's size (390x844) and a desktop's. A violation of impact "serious" or "critical" fails the
test unless its rule is in EXCEPTIONS below with the reason it does not apply.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from playwright.sync_api import expect
from sqlalchemy import select

from database.models import User

pytestmark = pytest.mark.browser

AXE = Path(__file__).resolve().parents[2] / ".cache" / "axe" / "node_modules" / "axe-core" / "axe.min.js"
SIZES = {"phone": (390, 844), "desktop": (1280, 800)}
BLOCKING = ("serious", "critical")
# rule id -> why a serious/critical finding of it is not a barrier on these pages. Empty: none is excused.
EXCEPTIONS: dict[str, str] = {}


@pytest.fixture(scope="module")
def axe_source() -> str:
    if not AXE.exists():
        pytest.skip(f"axe-core is not installed at {AXE} (bash scripts/install_test_deps.sh installs it with npm)")
    return AXE.read_text(encoding="utf-8")


@pytest.fixture
def slower_timer(live_server):
    """A 900 s task lasts 27 real seconds instead of 9 (its minimum 9), so a loaded machine still gets a
    reply and a failed reply scanned before the chat's time is up."""
    settings = live_server.runtime.settings
    before = settings.pilot_timer_scale
    settings.pilot_timer_scale = 0.03
    yield
    settings.pilot_timer_scale = before


class Scan:
    """Runs axe on a page and keeps the blocking violations, per page name, to report them all at once."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.found: dict[str, list[dict]] = {}
        self.scanned: list[str] = []

    def __call__(self, page, name: str) -> None:
        page.wait_for_load_state("networkidle")
        if not page.evaluate("typeof window.axe === 'object'"):
            page.evaluate(self.source)  # through the DevTools protocol: the page's CSP does not apply
        result = page.evaluate("axe.run(document, {resultTypes: ['violations']})")
        self.scanned.append(name)
        blocking = [
            {"rule": v["id"], "impact": v["impact"], "help": v["help"],
             "targets": [node["target"] for node in v["nodes"]][:5]}
            for v in result["violations"] if v["impact"] in BLOCKING and v["id"] not in EXCEPTIONS
        ]
        if blocking:
            self.found[name] = blocking

    def assert_clean(self) -> None:
        assert not self.found, "serious or critical accessibility violations:\n" + json.dumps(
            self.found, ensure_ascii=False, indent=1)


def register_through_the_page(page, username: str, scan: Scan, size: str) -> None:
    page.goto("/")
    expect(page.locator("#consent-agree")).to_be_visible()
    scan(page, f"{size}: consent")
    page.click("#consent-continue")  # not ticked: the error is shown
    expect(page.get_by_role("alert")).not_to_have_text("")
    scan(page, f"{size}: consent with its error")
    page.check("#consent-agree")
    page.click("#consent-continue")
    page.fill("#username", username)
    page.fill("#password", "password")
    page.fill("#password-repeat", "password")
    page.click("#register-submit")
    expect(page.get_by_role("alert").filter(has_text="密码")).to_be_visible()
    scan(page, f"{size}: register with a weak-password error")
    page.fill("#password", "browser-pass-1")
    page.fill("#password-repeat", "browser-pass-1")
    page.click("#register-submit")
    expect(page.locator(".task-card")).to_have_count(4)


@pytest.mark.parametrize("size", SIZES)
def test_every_participant_page_has_no_serious_or_critical_violation(new_page, live_server, axe_source, size,
                                                                     slower_timer):
    scan = Scan(axe_source)
    page = new_page(*SIZES[size])
    register_through_the_page(page, f"axe_{size}", scan, size)
    scan(page, f"{size}: task list")

    page.goto("/#/task/T1")
    expect(page.locator("button.start-task")).to_be_visible()
    scan(page, f"{size}: task intro")
    page.click("button.start-task")
    page.fill("#message-input", "你好，我叫小林，周末喜欢去香山爬山。")
    page.press("#message-input", "Enter")
    expect(page.locator(".msg.assistant:not(.pending)")).to_have_count(1, timeout=20_000)
    live_server.replies.failing.set()
    try:
        page.fill("#message-input", "最近在准备毕业论文。")
        page.click("#send")
        expect(page.locator(".msg.user.failed")).to_have_count(1, timeout=20_000)
    finally:
        live_server.replies.failing.clear()
    scan(page, f"{size}: chat with a reply and a failed reply")

    expect(page.locator("#finish")).to_be_enabled(timeout=20_000)
    page.click("#finish")
    page.click("#finish-confirm")
    expect(page.locator("form.questionnaire")).to_be_visible(timeout=15_000)
    scan(page, f"{size}: questionnaire")
    page.click("#questionnaire-submit")
    expect(page.locator(".q-item.has-error").first).to_be_visible()
    scan(page, f"{size}: questionnaire with problems marked")
    for item in page.locator(".q-item").all():
        item_id, kind = item.get_attribute("data-item-id"), item.get_attribute("data-type")
        options = item.locator(f"label[for^='q-{item_id}-']")
        if options.count():
            options.nth(3 if kind == "ios" else 0).click()
        else:
            item.locator("textarea").fill("好")
    page.click("#questionnaire-submit")
    expect(page.locator("#return-link")).to_be_visible()
    scan(page, f"{size}: after the task")

    page.click("#back-to-tasks")
    expect(page.locator("h1")).to_have_text("我的任务")
    page.click("#language-toggle")
    expect(page.locator("h1")).to_have_text("My tasks")
    scan(page, f"{size}: task list in English")
    page.click("#logout")
    expect(page.locator("#login-username")).to_be_visible()
    scan(page, f"{size}: log in")

    assert len(scan.scanned) == 11
    scan.assert_clean()


def test_the_admin_console_has_no_serious_or_critical_violation(new_page, live_server, admin_account, bot,
                                                               axe_source, screenshot):
    scan = Scan(axe_source)
    participant = bot()
    user = participant.register("axe_admin_view")["user"]
    started = time.monotonic()
    participant.start("T1")
    participant.say("T1", "我叫阿明，是一名护士。")
    participant.finish_task("T1", started)

    page = new_page(1280, 800)
    page.goto("/admin")  # not signed in: the admins' own sign-in page
    expect(page.locator("#admin-login-username")).to_be_visible()
    scan(page, "admin: sign-in page")
    page.fill("#admin-login-username", admin_account[0])
    page.fill("#admin-login-password", admin_account[1])
    page.click("#admin-login-submit")
    expect(page.locator("#participants")).to_be_visible()
    expect(page.locator(f"#participants tbody tr[data-id='{user['id']}']")).to_be_visible(timeout=10_000)
    scan(page, "admin: monitor")
    screenshot(page, "admin_monitor")
    page.goto(f"/admin#/participant/{user['id']}")
    expect(page.locator("h1")).to_contain_text(user["participant_code"])
    scan(page, "admin: participant record")
    for view in ("failures", "plots", "export"):
        page.goto(f"/admin#/{view}")
        expect(page.locator(f"nav a[data-route={view}]")).to_have_attribute("aria-current", "page")
        scan(page, f"admin: {view}")
    page.click("#language-toggle")  # kept on the admin's account: switched back below for the other tests
    try:
        page.goto("/admin#/monitor")
        expect(page.locator("#participants")).to_be_visible()
        expect(page.locator("h1")).not_to_contain_text("监控")
        scan(page, "admin: monitor in English")
        screenshot(page, "admin_monitor_en")
    finally:
        with live_server.runtime.db.Session() as session:
            admin = session.scalar(select(User).where(User.username == admin_account[0]))
            admin.language = "zh"
            session.commit()

    assert len(scan.scanned) == 7
    scan.assert_clean()
