"""Issue 28 item 12: ``Retry-After`` agrees with the body on rate-limited routes, for a 429 (the limit's
window) and for a 503 (back-pressure), and the bots wait for that same value."""
from __future__ import annotations

import pytest

from services.llm.chain import LLMService
from services.research.bots.client import retry_wait
from tests.model_doubles import DownModel
from tests.routes.test_cohort_limits import _register_logged_in, limited_app  # noqa: F401 - the fixture


def test_a_429_says_the_same_wait_in_its_header_and_body(limited_app, clock):  # noqa: F811
    app = limited_app(RATE_LIMIT_MESSAGES_PER_ACCOUNT="3 per minute")
    api = _register_logged_in(app, "alice01")
    assert api.post("/api/tasks/T1/start").status_code == 201
    answers = []
    for n in range(4):
        clock.advance(2)
        answers.append(api.post("/api/tasks/T1/messages", json={"content": f"我想说第 {n} 件事情"}))
    assert [r.status_code for r in answers] == [201, 201, 201, 429]
    assert "Retry-After" not in answers[0].headers  # only a refusal says when to come back
    refused = answers[-1]
    seconds = refused.get_json()["details"]["retry_after_seconds"]
    assert int(refused.headers["Retry-After"]) == seconds and 1 <= seconds <= 61  # a minute, rounded up
    assert retry_wait(refused.headers, refused.get_json()) == seconds


def test_a_503_on_a_rate_limited_route_keeps_its_own_wait(limited_app, clock):  # noqa: F811
    """The probe: 503 with retry_after_seconds 2 in the body and Retry-After 59 (the limit's window)."""
    app = limited_app(RATE_LIMIT_MESSAGES_PER_ACCOUNT="30 per minute")
    runtime = app.extensions["memory_lab"]
    api = _register_logged_in(app, "bob01")
    assert api.post("/api/tasks/T1/start").status_code == 201
    runtime.llm = LLMService([DownModel()], on_failure=runtime.record_failure)
    down = api.post("/api/tasks/T1/messages", json={"content": "你好，在吗？我想聊聊。"})
    assert down.status_code == 503
    seconds = down.get_json()["details"]["retry_after_seconds"]
    assert int(down.headers["Retry-After"]) == seconds and seconds < 30
    assert retry_wait(down.headers, down.get_json()) == seconds


@pytest.mark.parametrize(("header", "body", "expected"), [
    ("7", {"details": {"retry_after_seconds": 7}}, 7), (None, {"details": {"retry_after_seconds": 3}}, 3),
    ("5", {}, 5), (None, {}, 1), ("600", {}, 600), ("99999", {}, 3600)])
def test_the_bots_read_one_wait(header, body, expected):
    assert retry_wait({"Retry-After": header} if header else {}, body) == expected
