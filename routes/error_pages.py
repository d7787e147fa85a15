"""The app's own error pages (404, 500 and the rest) for pages, in the reader's language; /api keeps JSON.

The language: routes.i18n.page_language (an explicit ``?lang=``, the signed-in account's, the browser's, the
study's default, among the languages with a catalog); the words: the catalogs' ``error_page.*`` keys.
"""
from __future__ import annotations

from flask import render_template, request

from routes.i18n import html_lang, page_language

# the statuses with their own words in the catalogs (error_page.<status>.title/what/todo); the rest say "default"
OWN_TEXTS = (404, 500, 503)


def wants_json() -> bool:
    """/api answers in JSON (the error shape {"error", "message"}); so does any client that asks for JSON."""
    return request.path.startswith("/api/") or request.accept_mimetypes.best == "application/json"


def error_page(status: int, study, headers: dict[str, str] | None = None):
    """The HTML error page for ``status`` in the reader's language, as a (body, status, headers) response."""
    language = page_language(study.default_language)
    which = status if status in OWN_TEXTS else "default"
    contact = study.consent.contact.get(language) if study.consent.contact else None
    body = render_template("error.html", html_lang=html_lang(language), status=status, which=which,
                           contact=contact, study_name=study.name)
    return body, status, {**(headers or {}), "Content-Type": "text/html; charset=utf-8"}
