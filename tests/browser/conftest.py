"""Browser tests: the real app on 127.0.0.1 and Debian's headless Chromium driven by Playwright.

One live server (werkzeug, threaded) serves every browser test of the session on a fresh SQLite
database in pilot mode. ``DAY_SECONDS = 864`` makes one study day 864 real seconds (a time scale of
1/100): the 900-study-second task timer lasts 9 real seconds and the 300-second minimum 3 seconds,
short enough for a test and long enough that a page is not raced by its own timer. The idle-gap
threshold stays 120 real seconds.

The tests skip, saying why, only when Chromium is missing or cannot start. Set
``MEMORYLAB_SCREENSHOTS=docs/screenshots`` to keep screenshots of the pages a test visits.
"""
from __future__ import annotations

import http.cookiejar
import json
import os
import shutil
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import expect
from sqlalchemy import select
from werkzeug.serving import make_server

from config import Settings
from database.models import TaskSession
from services.llm.types import ChatRequest, ChatResult, ProviderError

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic",
]
DAY_SECONDS = 864.0
TIME_SCALE = DAY_SECONDS / 86400
ADMIN_USERNAME = "labadmin"
ADMIN_PASSWORD = "admin-password-1"
# How long a page's action (click, fill) and an expect() wait for their condition at most, unless a test says
# otherwise. expect()'s own default, 5 s, was what failed under heavy load (a reply or a re-rendered list taking
# longer on a machine shared by several test runs); the condition is still checked as soon as it holds.
WAIT_MS = 15_000
expect.set_options(timeout=WAIT_MS)


class SwitchableReplies:
    """The offline responder, with a switch that makes it fail like an unreachable provider.

    Lets a browser test see what a participant sees when no provider answers (their message is
    kept and a retry button appears) without changing anything else about the reply path."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.name = inner.name
        self.model = inner.model
        self.failing = threading.Event()

    def _check(self) -> None:
        if self.failing.is_set():
            raise ProviderError("switched off by the browser test", provider=self.name,
                                kind="connection_error")

    def complete(self, request: ChatRequest) -> ChatResult:
        self._check()
        return self.inner.complete(request)

    def stream(self, request: ChatRequest):
        self._check()
        yield from self.inner.stream(request)


@dataclass
class LiveServer:
    base_url: str
    app: Any
    replies: SwitchableReplies

    @property
    def runtime(self):
        return self.app.extensions["memory_lab"]

    def url(self, path: str) -> str:
        return self.base_url + path


def browser_settings(folder: Path, template: Path, **overrides) -> Settings:
    """The settings of an app a browser test serves: its SQLite database ``folder``/browser.db, a copy of the
    run's migrated ``template`` (the ``migrated_sqlite_template`` fixture: migrating is the slow part), offline
    providers, pilot days of DAY_SECONDS, no scheduler, no rate limits, no retries; ``overrides`` are
    Settings.from_env's keywords."""
    database = folder / "browser.db"
    shutil.copyfile(template, database)
    options = dict(
        database_url=f"sqlite:///{database}", secret_key="browser-test-secret", testing=True, scheduler_enabled=False,
        consolidate_inline=True, rate_limits_enabled=False, day_seconds=DAY_SECONDS, assignment_seed=7,
        llm_providers=["offline"], embedding_provider="offline", llm_max_retries=0, run_migrations_on_start=False,
    )
    return Settings.from_env(**{**options, **overrides})


@pytest.fixture(scope="session")
def live_server(tmp_path_factory, migrated_sqlite_template) -> LiveServer:
    from app import create_app

    app = create_app(browser_settings(tmp_path_factory.mktemp("browser"), migrated_sqlite_template))
    runtime = app.extensions["memory_lab"]
    replies = SwitchableReplies(runtime.llm.providers[0])
    runtime.llm.providers[0] = replies
    for base_url in served(app, "browser-test-server"):
        yield LiveServer(base_url=base_url, app=app, replies=replies)


def served(app, name: str):
    """Yield the base URL of ``app`` served on 127.0.0.1 (a free port) by a thread called ``name``; then
    stop the server, the app's background work and its database connections."""
    server = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, name=name, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    thread.join(timeout=5)
    runtime = app.extensions["memory_lab"]
    runtime.background.shutdown()
    runtime.db.dispose()


@pytest.fixture(scope="session")
def browser():
    if not Path(CHROMIUM).exists():
        pytest.skip(f"{CHROMIUM} is not installed (make test installs Debian's chromium package)")
    from playwright.sync_api import sync_playwright

    playwright = sync_playwright().start()
    try:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
    except Exception as exc:  # any launch failure means there is no browser to test with
        playwright.stop()
        pytest.skip(f"{CHROMIUM} could not be launched: {exc}")
    yield chromium
    chromium.close()
    playwright.stop()


def page_factory(browser, base_url: str, **context_options):
    """Yield ``factory(width=..., height=..., locale=...)`` -> a page in a fresh browser context (its own cookies)
    on ``base_url``; close the contexts afterwards. Uncaught JavaScript errors on any page fail the test."""
    contexts = []
    errors: list[str] = []

    def factory(width: int = 1280, height: int = 900, locale: str = "zh-CN"):
        context = browser.new_context(base_url=base_url, locale=locale, viewport={"width": width, "height": height},
                                      **context_options)
        context.set_default_timeout(WAIT_MS)
        contexts.append(context)
        page = context.new_page()
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        return page

    yield factory
    for context in contexts:
        context.close()
    assert not errors, f"JavaScript errors on the page: {errors}"


@pytest.fixture
def new_page(browser, live_server):
    """new_page(width=..., height=...) -> a page in a fresh browser context (its own cookies)."""
    yield from page_factory(browser, live_server.base_url, accept_downloads=True)


@pytest.fixture
def screenshot():
    """screenshot(page, name): keep a PNG in $MEMORYLAB_SCREENSHOTS when it is set; otherwise nothing."""
    folder = os.environ.get("MEMORYLAB_SCREENSHOTS")

    def take(page, name: str, *, full_page: bool = False) -> None:
        if folder:
            Path(folder).mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(Path(folder) / f"{name}.png"), full_page=full_page)

    return take


@pytest.fixture(scope="session")
def admin_account(live_server) -> tuple[str, str]:
    from services.participants.account_service import create_admin

    runtime = live_server.runtime
    with runtime.db.Session() as session:
        create_admin(session, ADMIN_USERNAME, ADMIN_PASSWORD, runtime.clock)
    return ADMIN_USERNAME, ADMIN_PASSWORD


@pytest.fixture
def admin_back_in_chinese(live_server, admin_account):
    """The session's admin is shared: signing in with an English browser or switching to English changes the
    account's language, which later tests read. It goes back to Chinese afterwards."""
    yield
    from sqlalchemy import update

    from database.models import User as Account

    with live_server.runtime.db.Session() as session:
        session.execute(update(Account).where(Account.username == admin_account[0]).values(language="zh"))
        session.commit()


class HttpParticipant:
    """A bot participant talking to the live server over real HTTP, like a second browser would."""

    def __init__(self, base_url: str, min_real_seconds: float) -> None:
        self.base_url = base_url
        self.min_real_seconds = min_real_seconds
        # ProxyHandler({}) keeps a proxy from the environment away from 127.0.0.1
        self.opener = urllib.request.build_opener(
            urllib.request.ProxyHandler({}), urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))
        self.token: str | None = None

    def request(self, method: str, path: str, body: dict | None = None) -> tuple[int, dict]:
        headers = {"Accept": "application/json"}
        data = None
        if method == "POST":
            if self.token is None:
                self.token = self.request("GET", "/api/auth/csrf")[1]["csrf_token"]
            headers.update({"Content-Type": "application/json", "X-CSRFToken": self.token})
            data = json.dumps(body or {}).encode()
        request = urllib.request.Request(self.base_url + path, data=data, headers=headers, method=method)
        try:
            with self.opener.open(request, timeout=30) as response:
                status, payload = response.status, json.loads(response.read() or b"{}")
        except urllib.error.HTTPError as exc:
            status, payload = exc.code, json.loads(exc.read() or b"{}")
        if isinstance(payload, dict) and payload.get("csrf_token") and path != "/api/auth/csrf":
            self.token = payload["csrf_token"]
        return status, payload

    def post(self, path: str, body: dict | None = None) -> dict:
        status, payload = self.request("POST", path, body)
        assert status < 300, (path, status, payload)
        return payload

    def get(self, path: str) -> dict:
        status, payload = self.request("GET", path)
        assert status < 300, (path, status, payload)
        return payload

    def register(self, username: str, password: str = "bot-password-1") -> dict:
        return self.post("/api/auth/register", {"username": username, "password": password, "consent": True})

    def start(self, task_id: str) -> None:
        self.post(f"/api/tasks/{task_id}/start")

    def say(self, task_id: str, text: str) -> dict:
        return self.post(f"/api/tasks/{task_id}/messages", {"content": text})

    def finish_chat(self, task_id: str, started: float) -> None:
        """Finish the chat once the minimum task time, counted from ``started``, has passed. The server counts
        from its own start time, which a loaded machine may set a little later: a "too early" is waited out
        (for at most 10 s), anything else fails at once."""
        time.sleep(max(0.0, started + self.min_real_seconds + 0.2 - time.monotonic()))
        deadline = time.monotonic() + 10.0
        status, payload = self.request("POST", f"/api/tasks/{task_id}/finish")
        while status == 409 and payload.get("error") == "too_early" and time.monotonic() < deadline:
            time.sleep(0.2)
            status, payload = self.request("POST", f"/api/tasks/{task_id}/finish")
        assert status < 300, (f"/api/tasks/{task_id}/finish", status, payload)

    def finish_task(self, task_id: str, started: float) -> None:
        """Finish the chat once the minimum has passed, then answer every item at its scale minimum."""
        self.finish_chat(task_id, started)
        items = self.get(f"/api/tasks/{task_id}/questionnaire")["items"]
        answers = {}
        for item in items:
            if item["type"] in ("likert", "ios") or (item["type"] == "attention" and not item["options"]):
                answers[item["id"]] = item["min"]
            elif item["options"]:
                answers[item["id"]] = item["options"][0]["value"]
            else:
                answers[item["id"]] = "ok"
        self.post(f"/api/tasks/{task_id}/questionnaire", {"answers": answers})


@pytest.fixture
def bot(live_server):
    """bot() -> a new HttpParticipant on the live server."""
    minimum = live_server.runtime.study.timing.min_active_seconds * TIME_SCALE
    return lambda: HttpParticipant(live_server.base_url, minimum)


# beyond the minimum, so the finish that follows is not refused by a rounding of the credited time
MINIMUM_MARGIN_SECONDS = 0.25


def minimum_time_behind(runtime, user_id: int, task_id: str) -> float:
    """Move the start and the last action of the participant's running ``task_id`` back by the study's minimum
    task time in real seconds (on ``runtime``'s timer scale) and a margin, as if they had been chatting that long:
    their next action is credited the minimum, the gap being under the idle-gap threshold. For a test that needs
    the minimum behind a participant and does not test it, instead of waiting it out (3 real seconds on the shared
    live server); the finish is still checked by the server's own timer. Returns the ``started`` from which
    HttpParticipant.finish_chat counts the minimum, so that it does not wait either."""
    seconds = runtime.study.timing.min_active_seconds * runtime.settings.timer_scale + MINIMUM_MARGIN_SECONDS
    with runtime.db.Session() as session:
        attempt = session.scalar(select(TaskSession).where(
            TaskSession.user_id == user_id, TaskSession.task_id == task_id, TaskSession.status == "in_progress"))
        attempt.started_at -= timedelta(seconds=seconds)
        attempt.last_activity_at -= timedelta(seconds=seconds)
        session.commit()
    return time.monotonic() - seconds


def sign_in(page, username: str, password: str = "bot-password-1") -> None:
    """Sign a bot participant in through the login form (the page then shows the task list)."""
    page.goto("/#/login")
    page.fill("#login-username", username)
    page.fill("#login-password", password)
    page.click("#login-submit")
