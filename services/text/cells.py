"""Cells of the CSV files researchers and paymasters open: text that encodes as UTF-8 (stored rows from before
the input checks may hold a NUL or an unpaired surrogate), numbers fixed-point at a stated precision, times and
JSON as text, and, when asked, no cell that a spreadsheet would run as a formula."""
from __future__ import annotations

import json
import re
from datetime import datetime
from typing import Any

# A NUL (refused by PostgreSQL and many CSV readers) or a lone UTF-16 surrogate (cannot be encoded as UTF-8).
BAD_CHARACTERS = re.compile("[\x00\ud800-\udfff]")
# CSV cells hold non-integer numbers fixed-point with at most this many decimals (the codebook says so).
NUMBER_DECIMALS = 6
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
_NUMBER = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?")


def printable(value: str) -> str:
    """Stored text made safe to encode: NULs dropped, unpaired surrogates shown as U+FFFD.

    For views and CSV cells of rows stored before the input checks (``services.participants.input_checks``)
    existed."""
    if BAD_CHARACTERS.search(value) is None:
        return value
    return BAD_CHARACTERS.sub(lambda m: "" if m.group() == "\x00" else "\ufffd", value)


def time_text(value: datetime | None) -> str | None:
    return value.isoformat(sep=" ", timespec="seconds") if value else None


def json_text(value: Any, **kwargs: Any) -> str:
    """``json.dumps`` as UTF-8-safe text: unpaired surrogates in old rows are written as \\u escapes."""
    text = json.dumps(value, ensure_ascii=False, **kwargs)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(value, ensure_ascii=True, **kwargs)
    return text


def json_or_none(value: Any) -> str | None:
    return None if value is None else json_text(value, sort_keys=True)


def number_text(value: float) -> str:
    """A float as a CSV cell: fixed-point, at most NUMBER_DECIMALS decimals, no trailing zeros, no ``-0``."""
    if value != value or value in (float("inf"), float("-inf")):
        return str(value)
    text = f"{value:.{NUMBER_DECIMALS}f}".rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


def cell(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, float):
        return number_text(value)
    if isinstance(value, datetime):
        return time_text(value)
    if isinstance(value, (dict, list)):
        return json_or_none(value)
    return value


def safe_cell(value: Any, *, escape_formulas: bool) -> Any:
    """A CSV cell that encodes as UTF-8 and, when asked, cannot start a spreadsheet formula."""
    value = cell(value)
    if not isinstance(value, str):
        return value
    value = printable(value)
    if escape_formulas and value.startswith(FORMULA_START) and not _NUMBER.fullmatch(value):
        return "'" + value
    return value
