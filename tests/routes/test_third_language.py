"""A third language is one more catalog: with a dummy one dropped into the translations folder (no code changed),
the server's pages and the words the browser loads speak it, and what it lacks falls back to English."""
from __future__ import annotations

import dataclasses

import pytest

from tests.pseudo_catalog import PSEUDO, UNTRANSLATED, pseudo, translations_with_a_third_language


@pytest.fixture
def settings(settings, tmp_path):
    return dataclasses.replace(settings, translations_dir=str(translations_with_a_third_language(tmp_path)))


def test_the_browser_loads_the_third_catalog_with_english_behind_it(client):
    body = client.get("/i18n/messages.json").get_json()
    assert body["languages"] == ["en", PSEUDO, "zh"]
    words = body["messages"][PSEUDO]
    assert words["admin.login.title"] == pseudo(body["messages"]["en"]["admin.login.title"])
    assert words["error_code.time_up"] == pseudo("The time for this chat is up.")
    assert words[UNTRANSLATED[0]] == body["messages"]["en"][UNTRANSLATED[0]]
    assert set(words) == set(body["messages"]["en"]) == set(body["messages"]["zh"])
    # each catalog's BCP 47 tag, from its header, for <html lang> and the language button
    assert body["tags"] == {"en": "en", PSEUDO: PSEUDO, "zh": "zh-CN"}


@pytest.mark.parametrize("how", [{"query_string": {"lang": PSEUDO}}, {"headers": {"Accept-Language": "eo,en;q=0.5"}}])
def test_a_server_page_speaks_the_third_language(client, how):
    page = client.get("/no-such-page", **how)
    html = page.get_data(as_text=True)
    assert page.status_code == 404
    assert '<html lang="eo">' in html
    assert "<h1>⟦Page not found⟧</h1>" in html and "⟦Back to the study's start page⟧" in html


def test_without_the_catalog_the_same_request_is_answered_in_a_language_that_has_one(tmp_path, settings):
    import shutil

    shutil.rmtree(f"{settings.translations_dir}/{PSEUDO}")
    from app import create_app

    app = create_app(settings)
    try:
        html = app.test_client().get("/no-such-page", query_string={"lang": PSEUDO},
                                     headers={"Accept-Language": "en"}).get_data(as_text=True)
        assert '<html lang="en">' in html and "<h1>Page not found</h1>" in html
        assert app.test_client().get("/i18n/messages.json").get_json()["languages"] == ["en", "zh"]
    finally:
        app.extensions["memory_lab"].background.shutdown()
        app.extensions["memory_lab"].db.dispose()


def test_an_edited_catalog_is_read_again_and_the_browser_told_by_its_etag(client, settings):
    import os
    from pathlib import Path

    first = client.get("/i18n/messages.json")
    assert client.get("/i18n/messages.json", headers={"If-None-Match": first.headers["ETag"]}).status_code == 304
    po = Path(settings.translations_dir) / PSEUDO / "LC_MESSAGES" / "messages.po"
    po.write_text(po.read_text(encoding="utf-8").replace("⟦Page not found⟧", "⟦Page gone⟧"), encoding="utf-8")
    os.utime(po, (po.stat().st_atime, po.stat().st_mtime + 5))
    again = client.get("/i18n/messages.json", headers={"If-None-Match": first.headers["ETag"]})
    assert again.status_code == 200 and again.get_json()["messages"][PSEUDO]["error_page.404.title"] == "⟦Page gone⟧"
    assert "<h1>⟦Page gone⟧</h1>" in client.get("/nowhere", query_string={"lang": PSEUDO}).get_data(as_text=True)


def test_a_pre_flight_verdict_line_is_worded_wholly_by_the_third_catalog(settings, monkeypatch):
    """The CLI's and the report's target and shape lines: figures filled into the catalog's sentence."""
    from services.study import evidence
    from services.text.catalogs import Catalogs

    monkeypatch.setattr(evidence, "CATALOGS", Catalogs(settings.translations_dir))
    target = evidence.judge("zh T3 relevant recalled", 9, 64, 0.15)
    assert evidence.describe(target, PSEUDO) == pseudo(
        f"zh T3 relevant recalled: 14.1% (9/64; 95% one-sided 8.4%–22.7%; target ≥ 15%) — {pseudo('within error')}")
    shape = evidence.describe_difference(evidence.difference("zh T2 above T4", (30, 40), (10, 40)), PSEUDO)
    assert shape.startswith(pseudo("zh T2 above T4: +50.0% (30/40 vs 10/40; 95% one-sided lower bound")[:-1])
    assert shape.endswith(f"— {pseudo('above zero by more than its error')}⟧")


def test_staff_keep_a_third_language_participants_keep_the_studys(admin_client, make_participant):
    # the admin pages speak any language with a catalog, so an admin's choice of one is kept
    answer = admin_client.post("/api/auth/language", json={"language": PSEUDO})
    assert answer.status_code == 200, answer.get_json()
    assert admin_client.get("/api/auth/me").get_json()["user"]["language"] == PSEUDO
    for stray in ("xx", "../en", ["en"]):
        assert admin_client.post("/api/auth/language", json={"language": stray}).status_code == 400
    # a participant chats in the study's languages only: the dummy catalog is not one of them
    participant = make_participant()
    refused = participant.post("/api/auth/language", json={"language": PSEUDO})
    assert refused.status_code == 400 and refused.get_json()["error"] == "invalid_language"
    assert participant.post("/api/auth/language", json={"language": "en"}).status_code == 200
