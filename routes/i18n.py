"""The interface's language: Flask-Babel over the catalogs in translations/ (services.text.catalogs).

A page's language: an explicit ``?lang=``, then the signed-in account's language, then the browser's
``Accept-Language``, then the study's ``default_language`` - each only when a catalog for it exists. The server's
pages ask ``text(key, **params)``; the browser loads every catalog at once from ``GET /i18n/messages.json``
(static/js/i18n.js), so both read the same ``.po`` files.
"""
from __future__ import annotations

import hashlib
import json
import logging
from typing import Any

from flask import Blueprint, Flask, current_app, request
from flask_babel import Babel, Domain, force_locale, get_locale, gettext
from flask_login import current_user

from services.text.catalogs import FALLBACK_LANGUAGE, Catalogs, fill

log = logging.getLogger(__name__)
bp = Blueprint("i18n", __name__)


def catalogs() -> Catalogs:
    return current_app.extensions["catalogs"]


class CatalogDomain(Domain):
    """Flask-Babel's domain reading services.text.catalogs (compiled in memory from the .po files) instead of
    .mo files on disk."""

    def __init__(self, source: Catalogs) -> None:
        super().__init__(translation_directories=[str(source.directory)])
        self.source = source

    def get_translations(self):
        locale = get_locale()
        return self.source.translations(str(locale) if locale else FALLBACK_LANGUAGE)


def _base(tag: str | None) -> str:
    return (tag or "").replace("-", "_").split("_")[0].lower()


def _offered(tag: str | None) -> str | None:
    """The catalog language for a requested tag (``zh-CN`` -> ``zh``; an exact ``pt_BR`` first), or None."""
    if not tag:
        return None
    source = catalogs()
    exact = tag.replace("-", "_")
    for candidate in (exact, _base(tag)):
        if source.has(candidate):
            return candidate
    return None


def page_language(default: str | None = None) -> str:
    """The language this request's page is in (the order in the module's docstring)."""
    wanted = _offered(request.args.get("lang"))
    if wanted:
        return wanted
    try:
        if current_user.is_authenticated and _offered(current_user.language):
            return _offered(current_user.language)
    except Exception:  # the account cannot be read (the database failing): the browser's language then
        log.debug("no account language for this page", exc_info=True)
    for tag, _quality in request.accept_languages:
        found = _offered(tag)
        if found:
            return found
    if default is None:
        default = current_app.extensions["memory_lab"].study.default_language
    return _offered(default) or FALLBACK_LANGUAGE


def text(key: str, language: str | None = None, **params: Any) -> str:
    """The catalog text for ``key`` in this request's language (or ``language``), placeholders filled."""
    if language is not None:
        with force_locale(language):
            return fill(gettext(key), params)
    return fill(gettext(key), params)


def html_lang(language: str) -> str:
    """The page's ``<html lang>``: the BCP 47 tag its catalog declares (Chinese pages are ``zh-CN``)."""
    return catalogs().tag(language)


def install(app: Flask, source: Catalogs) -> None:
    app.extensions["catalogs"] = source
    babel = Babel()
    babel.init_app(app, default_locale=FALLBACK_LANGUAGE, locale_selector=page_language)
    babel.domain_instance = CatalogDomain(source)
    app.register_blueprint(bp)


_LAST_BODY: list[Any] = [(), b"", ""]  # (the compiled catalogs it was made from, body, ETag)


def _browser_body(source: Catalogs) -> tuple[bytes, str]:
    """The JSON of every catalog and its ETag, made again only when a catalog was (services.text.catalogs
    compiles a file again when it changes, so the compiled objects themselves say whether anything did)."""
    languages = source.languages()
    compiled = tuple(source.catalog(lang) for lang in languages)
    made_from, body, etag = _LAST_BODY
    if len(made_from) != len(compiled) or any(a is not b for a, b in zip(made_from, compiled, strict=False)):
        payload = {"languages": languages, "fallback": FALLBACK_LANGUAGE,
                   "tags": {catalog.language: catalog.tag for catalog in compiled},
                   "messages": {lang: source.messages(lang) for lang in languages}}
        body = json.dumps(payload, ensure_ascii=False, sort_keys=True).encode("utf-8")
        etag = hashlib.sha256(body).hexdigest()[:32]
        _LAST_BODY[:] = [compiled, body, etag]
    return body, etag


@bp.get("/i18n/messages.json")
def browser_messages():
    """Every catalog for the browser: ``{"languages": [...], "fallback": "en", "tags": {lang: BCP 47 tag},
    "messages": {lang: {key: text}}}``. Revalidated by ETag, so an edited catalog reaches the next page load."""
    body, etag = _browser_body(catalogs())
    response = current_app.response_class(body, mimetype="application/json")
    response.set_etag(etag)
    response.headers["Cache-Control"] = "no-cache"
    return response.make_conditional(request)
