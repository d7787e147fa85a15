"""What every response and every request body goes through: JSON parsing and writing that cannot
fail on hostile or damaged text, security headers, and the answer to a busy or read-only database.
"""
from __future__ import annotations

from typing import Any

from flask import Flask, Response, request
from flask.json.provider import DefaultJSONProvider

# No inline script anywhere (the pages load their modules from /static); no framing (clickjacking).
CONTENT_SECURITY_POLICY = "; ".join([
    "default-src 'self'",
    "script-src 'self'",
    "style-src 'self'",
    "img-src 'self' data: blob:",
    "connect-src 'self'",
    "object-src 'none'",
    "base-uri 'none'",
    "form-action 'self'",
    "frame-ancestors 'none'",
])
SECURITY_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
}

class SafeJSONProvider(DefaultJSONProvider):
    """Flask's JSON, made robust at both ends.

    Reading: a body nested deeper than the parser's recursion limit is bad JSON (400), not a 500.
    Writing: text stored before input checks existed may hold an unpaired surrogate, which UTF-8
    cannot encode; such a document is written with \\u escapes instead, losslessly, never a 500."""

    ensure_ascii = False

    def loads(self, s: str | bytes, **kwargs: Any) -> Any:
        try:
            return super().loads(s, **kwargs)
        except RecursionError as exc:
            raise ValueError("the JSON document is nested too deeply") from exc

    def dumps(self, obj: Any, **kwargs: Any) -> str:
        text = super().dumps(obj, **kwargs)
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            kwargs["ensure_ascii"] = True
            return super().dumps(obj, **kwargs)
        return text


def add_security_headers(response: Response) -> Response:
    for name, value in SECURITY_HEADERS.items():
        response.headers.setdefault(name, value)
    # API answers hold personal data (chats, answers, the admin's views): never kept by a cache
    if request.path.startswith("/api/"):
        response.headers["Cache-Control"] = "no-store"
    return response


def install(app: Flask) -> None:
    app.json = SafeJSONProvider(app)
    app.after_request(add_security_headers)


def unavailable_body(retry_after_seconds: int) -> dict[str, Any]:
    return {"error": "database_busy", "retryable": True,
            "message": "the database is busy right now and what you sent was NOT saved; please try again "
                       "in a moment", "details": {"retry_after_seconds": retry_after_seconds}}

