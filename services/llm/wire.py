"""Helpers every provider implementation shares: key redaction, a storable base URL,
``Retry-After`` parsing, HTTP status -> error kind, per-thread stream usage, JSON-mode prompts."""
from __future__ import annotations

import email.utils
import re
import threading
import time
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from services.llm.types import AUTH_ERROR, CLIENT_ERROR, RATE_LIMITED, SERVER_ERROR, TIMEOUT

_SECRET_PATTERNS = [
    re.compile(r"\bsk-[A-Za-z0-9_\-*.]{4,}"),
    re.compile(r"(?i)(bearer\s+)[A-Za-z0-9_\-.=*]{6,}"),
    re.compile(r"(?i)(api[_-]?key[\"']?\s*[:=]\s*[\"']?)[A-Za-z0-9_\-.*]{6,}"),
]


def redact(text: str, secrets: tuple[str | None, ...] = ()) -> str:
    """``text`` with the given secrets and anything shaped like an API key replaced by ``***``.

    Some APIs echo a (partially masked) key in their 401 body; that must not reach the
    failure log, the attempts stored with a message, or an export."""
    for secret in secrets:
        if secret and len(secret) >= 4:
            text = text.replace(secret, "***")
    for pattern in _SECRET_PATTERNS:
        text = pattern.sub(lambda m: (m.group(1) if m.groups() else "") + "***", text)
    return text


def public_url(url: str | None) -> str | None:
    """A base URL fit for storing with a reply: no user:password, no query string."""
    if not url:
        return None
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


def parse_retry_after(headers: Mapping[str, Any] | None, now: float | None = None) -> float | None:
    """Seconds to wait from ``retry-after-ms``, ``Retry-After`` (seconds or an HTTP date), else None."""
    if not headers:
        return None
    lowered = {str(k).lower(): str(v) for k, v in headers.items()}
    for name, divisor in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        value = lowered.get(name)
        if value is None:
            continue
        try:
            seconds = float(value) / divisor
        except ValueError:
            continue
        return seconds if seconds >= 0 else None
    value = lowered.get("retry-after")
    if value:
        parsed = email.utils.parsedate_tz(value)
        if parsed is not None:
            return max(0.0, email.utils.mktime_tz(parsed) - (time.time() if now is None else now))
    return None


def error_kind_for_status(status_code: int) -> tuple[str, bool]:
    """The error kind for an HTTP status, and whether trying again may help."""
    if status_code == 429:
        return RATE_LIMITED, True
    if status_code == 408:
        return TIMEOUT, True
    if status_code >= 500:
        return SERVER_ERROR, True
    if status_code in (401, 403):
        return AUTH_ERROR, False
    return CLIENT_ERROR, False


class StreamUsage:
    """``last_usage`` kept per thread: concurrent participants stream through one provider object."""

    _usage_local: threading.local

    @property
    def last_usage(self) -> dict[str, int]:
        local = self.__dict__.setdefault("_usage_local", threading.local())
        return getattr(local, "usage", {})

    @last_usage.setter
    def last_usage(self, usage: dict[str, int]) -> None:
        local = self.__dict__.setdefault("_usage_local", threading.local())
        local.usage = usage


def json_instruction(messages: list[dict[str, str]], language: str) -> tuple[list[dict[str, str]], bool]:
    """Make sure a JSON-mode prompt mentions JSON: OpenAI-style and DashScope APIs reject it otherwise.

    The note joins the existing system message rather than adding a second one, which some
    chat templates (served by vLLM or llama.cpp) refuse. Returns the messages to send and
    whether they differ from the stored prompt."""
    if any("json" in (m.get("content") or "").lower() for m in messages):
        return messages, False
    note = "请只输出一个 JSON 对象。" if language == "zh" else "Answer with a single JSON object."
    if messages and messages[0].get("role") == "system":
        first = {**messages[0], "content": f"{messages[0]['content']}\n\n{note}"}
        return [first, *messages[1:]], True
    return [{"role": "system", "content": note}, *messages], True
