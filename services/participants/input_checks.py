"""Checks every piece of client input passes before anything is stored.

Text: a lone UTF-16 surrogate (``"\\udc80"`` in JSON) cannot be encoded as UTF-8, so it breaks
the export and PostgreSQL later; a NUL byte is refused by PostgreSQL and by many CSV readers.
Both are refused at the door with a 400 that names where they were, so nothing bad is stored.

Numbers: ``str.isdigit()`` is true for ``"²"`` and for 30-digit strings that overflow the
database's integers, so query parameters are parsed by ``bounded_int`` instead.
"""
from __future__ import annotations

import re
from typing import Any

from services.platform.errors import BadInput
from services.text.cells import BAD_CHARACTERS

_ASCII_DIGITS = re.compile(r"[0-9]{1,18}")
# The database's integer columns are 32-bit on PostgreSQL: a larger id names nothing.
MAX_DB_ID = 2**31 - 1


def text_problem(value: str) -> str | None:
    """Why ``value`` cannot be stored as text, or None when it can."""
    match = BAD_CHARACTERS.search(value)
    if match is None:
        return None
    return "contains a NUL character" if match.group() == "\x00" else "contains an unpaired UTF-16 surrogate"


def check_text(value: Any, field: str) -> None:
    """Raise BadInput when ``value`` is a string that cannot be stored."""
    if isinstance(value, str):
        problem = text_problem(value)
        if problem:
            raise BadInput(f"{field} {problem}; please remove it", code="invalid_text",
                           details={"field": field, "problem": problem})


def check_json_text(document: Any) -> None:
    """Refuse a parsed JSON document holding any string (key or value) that cannot be stored.

    Walks with an explicit stack, so a deeply nested document cannot exhaust the recursion limit."""
    stack: list[tuple[str, Any]] = [("body", document)]
    while stack:
        path, value = stack.pop()
        if isinstance(value, str):
            check_text(value, path)
        elif isinstance(value, dict):
            for key, item in value.items():
                check_text(key, f"{path} key")
                stack.append((f"{path}.{key}", item))
        elif isinstance(value, list):
            stack.extend((f"{path}[{i}]", item) for i, item in enumerate(value))


def bounded_int(raw: str | None, *, name: str, low: int, high: int, default: int | None = None) -> int | None:
    """Parse a query parameter made of ASCII digits only, within [low, high]; 400 otherwise."""
    if raw is None:
        return default
    if not _ASCII_DIGITS.fullmatch(raw) or not low <= int(raw) <= high:
        raise BadInput(f"{name} must be a whole number from {low} to {high}", code=f"invalid_{name}",
                       details={name: raw[:40]})
    return int(raw)
