"""The panel's refusal page (templates/panel_message.html): the page's language and English, escaped, never
cached."""
from __future__ import annotations


def test_an_invalid_panel_link_gets_the_page_in_both_languages(client):
    page = client.get("/enter?pid=%3Cscript%3E")  # a malformed participant id
    text = page.get_data(as_text=True)
    assert page.status_code == 400 and page.headers["Cache-Control"] == "no-store"
    assert "<title>链接无效 · Invalid link</title>" in text and "<h1>链接无效 · Invalid link</h1>" in text
    assert "这个研究链接没有带有效的参与者编号。请使用招募平台给你的链接重新进入。" in text
    assert '<p lang="en">This study link carries no valid participant id. Please use the link your panel gave ' \
           "you.</p>" in text
    assert '<a href="/#/login">登录 / Log in</a>' in text


def test_the_page_escapes_what_it_shows(app):
    from routes.panel import _render_message

    with app.test_request_context():
        response = _render_message(404, [("zh", "<b>x</b>", "甲 & 乙", "登录"), ("en", "x", '"quoted" <script>', "in")])
    text = response.get_data(as_text=True)
    assert response.status_code == 404
    assert "<b>x</b>" not in text and "&lt;b&gt;x&lt;/b&gt;" in text
    assert "甲 &amp; 乙" in text and "<script>" not in text


def test_an_english_reader_gets_the_page_in_english_only(client):
    text = client.get("/enter?pid=%3Cscript%3E", headers={"Accept-Language": "en-GB"}).get_data(as_text=True)
    assert '<html lang="en">' in text and "<title>Invalid link</title>" in text and "链接" not in text
    assert '<a href="/#/login">Log in</a>' in text
