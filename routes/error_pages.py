"""The app's own error pages (404, 500 and the rest) for pages, in the reader's language; /api keeps JSON.

The language: an explicit ``?lang=zh|en``, then the signed-in account's language, then the browser's
``Accept-Language`` (among the languages the study speaks), then the study's ``default_language``.
"""
from __future__ import annotations

import logging

from flask import render_template, request
from flask_login import current_user

from services.text.languages import LANGUAGES

log = logging.getLogger(__name__)

# status -> (title, what happened, what to do) per language; any other status gets "default"
TEXTS: dict[str, dict[int | str, tuple[str, str, str]]] = {
    "zh": {
        404: ("找不到这个页面", "这个地址上没有页面。", "请检查链接，或回到研究首页。"),
        500: ("服务器出错了", "处理你的请求时服务器出了错，错误已经记录下来。",
              "请稍后刷新页面再试；如果一直出错，请联系研究团队。"),
        503: ("服务器正忙", "服务器暂时忙不过来。", "请稍等一分钟再刷新页面。"),
        "default": ("无法完成这个请求", "服务器没有完成这个请求。", "请回到研究首页再试一次。"),
    },
    "en": {
        404: ("Page not found", "There is no page at this address.",
              "Check the link, or go back to the study's start page."),
        500: ("Something went wrong on the server", "The server failed while handling your request; the error "
              "has been logged.", "Please reload the page in a moment; if it keeps happening, contact the "
              "research team."),
        503: ("The server is busy", "The server cannot take more requests right now.",
              "Please wait a minute, then reload the page."),
        "default": ("This request could not be completed", "The server did not complete this request.",
                    "Go back to the study's start page and try again."),
    },
}
HOME = {"zh": "返回研究首页", "en": "Back to the study's start page"}
CONTACT = {"zh": "联系研究团队：", "en": "Contact the research team:"}
CODE = {"zh": "错误代码", "en": "Error code"}


def wants_json() -> bool:
    """/api answers in JSON (the error shape {"error", "message"}); so does any client that asks for JSON."""
    return request.path.startswith("/api/") or request.accept_mimetypes.best == "application/json"


def page_language(default: str) -> str:
    wanted = (request.args.get("lang") or "").lower().split("-")[0]
    if wanted in LANGUAGES:
        return wanted
    try:
        if current_user.is_authenticated and current_user.language in LANGUAGES:
            return current_user.language
    except Exception:  # the account cannot be read (the database failing): the browser's language then
        log.debug("no account language for the error page", exc_info=True)
    for tag, _quality in request.accept_languages:
        base = tag.lower().split("-")[0]
        if base in LANGUAGES:
            return base
    return default if default in LANGUAGES else LANGUAGES[0]


def error_page(status: int, study, headers: dict[str, str] | None = None):
    """The HTML error page for ``status`` in the reader's language, as a (body, status, headers) response."""
    language = page_language(study.default_language)
    title, what, todo = TEXTS[language].get(status, TEXTS[language]["default"])
    contact = study.consent.contact.get(language) if study.consent.contact else None
    body = render_template("error.html", language=language, status=status, title=title, what=what, todo=todo,
                           home=HOME[language], contact_label=CONTACT[language], contact=contact,
                           code_label=CODE[language], study_name=study.name)
    return body, status, {**(headers or {}), "Content-Type": "text/html; charset=utf-8"}
