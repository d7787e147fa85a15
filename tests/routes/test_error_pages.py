"""Issue 28 item 17: unknown pages and server errors get the app's own pages in the reader's language (HTML);
/api keeps its JSON errors ({"error", "message"})."""
from __future__ import annotations

import pytest


@pytest.fixture
def app(app):
    def broken_page():
        raise RuntimeError("a bug on a page")

    def broken_api():
        raise RuntimeError("a bug in the API")

    app.add_url_rule("/broken-page-for-test", "broken_page_for_test", broken_page)
    app.add_url_rule("/api/broken-for-test", "broken_api_for_test", broken_api)
    return app


def _html(response) -> str:
    assert "text/html" in response.content_type
    return response.get_data(as_text=True)


def test_an_unknown_page_gets_the_app_s_404_in_the_reader_s_language(client):
    english = client.get("/no-such-page", headers={"Accept-Language": "en-US,en;q=0.9", "Accept": "text/html"})
    assert english.status_code == 404
    page = _html(english)
    assert '<html lang="en">' in page and "Page not found" in page and 'href="/"' in page
    assert "Not Found</h1>" not in page  # not werkzeug's page
    chinese = client.get("/no-such-page", headers={"Accept-Language": "zh-CN,zh;q=0.9"})
    assert chinese.status_code == 404 and "找不到这个页面" in _html(chinese) and 'lang="zh-CN"' in _html(chinese)
    asked = client.get("/no-such-page?lang=en", headers={"Accept-Language": "zh-CN"})
    assert "Page not found" in _html(asked)
    unknown = client.get("/no-such-page", headers={"Accept-Language": "de-DE"})  # the study's default: zh
    assert "找不到这个页面" in _html(unknown)


def test_a_signed_in_participant_gets_the_page_in_their_account_s_language(make_participant):
    participant = make_participant("error_page_en", language="en")
    response = participant.get("/no-such-page", headers={"Accept-Language": "zh-CN"})
    assert response.status_code == 404 and "Page not found" in _html(response)


def test_a_server_error_on_a_page_gets_the_app_s_500_page_and_on_the_api_json(app, client):
    page = client.get("/broken-page-for-test", headers={"Accept-Language": "en"})
    assert page.status_code == 500
    text = _html(page)
    assert "Something went wrong on the server" in text and "research team" in text and "a bug" not in text
    chinese = client.get("/broken-page-for-test", headers={"Accept-Language": "zh"})
    assert chinese.status_code == 500 and "服务器出错了" in _html(chinese)
    api = client.get("/api/broken-for-test")
    assert api.status_code == 500 and api.get_json() == {
        "error": "internal_error", "message": "something went wrong on the server; it has been logged"}


def test_the_api_keeps_its_json_errors(client):
    missing = client.get("/api/no-such-endpoint", headers={"Accept": "text/html", "Accept-Language": "en"})
    assert missing.status_code == 404 and missing.get_json()["error"] == "not_found"
    assert set(missing.get_json()) == {"error", "message"}
    wrong_method = client.get("/api/auth/logout")
    assert wrong_method.status_code == 405 and wrong_method.get_json()["error"] == "method_not_allowed"


def test_a_wrong_method_on_a_page_gets_the_page_with_its_allow_header(client):
    response = client.raw.put("/consent/copy", headers={"Accept-Language": "en"})
    assert response.status_code == 405 and "GET" in response.headers["Allow"]
    assert "This request could not be completed" in _html(response)
