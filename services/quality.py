"""Data-quality signals: how each message was typed, and instructed-response (attention) checks.

The participant page reports, with every message, the time from the first
keystroke to sending (``typing_ms``), the keystrokes, the characters pasted and
how often the page lost focus since the previous message of the task. They are
optional (an API client may send none) and validated here: a non-negative whole
number under a cap that no person reaches in one message, or a 400.

An attention item (``type: "attention"``) has one ``expected`` answer; any other
answer is a failed check. The monitor counts both per participant and its
filters flag pasted messages and failed checks.
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from database.models import Message, QuestionnaireResponse
from services.errors import BadInput
from services.study import Study

# Upper bounds per message: a day of typing, and counts far beyond any 4000-character message.
SIGNAL_CAPS: dict[str, int] = {
    "typing_ms": 24 * 3600 * 1000,
    "keystrokes": 200_000,
    "pasted_chars": 1_000_000,
    "focus_losses": 10_000,
}


def parse_signals(data: dict[str, Any]) -> dict[str, int | None]:
    """The optional quality fields of a chat message, validated; BadInput naming every bad one."""
    problems: dict[str, str] = {}
    signals: dict[str, int | None] = {}
    for name, cap in SIGNAL_CAPS.items():
        value = data.get(name)
        if value is None:
            signals[name] = None
        elif isinstance(value, bool) or not isinstance(value, int):
            problems[name] = "must be a whole number"
        elif not 0 <= value <= cap:
            problems[name] = f"must be between 0 and {cap}"
        else:
            signals[name] = value
    if problems:
        raise BadInput("invalid data-quality fields: " + ", ".join(sorted(problems)), code="invalid_quality_signal",
                       details={"fields": problems})
    return signals


def attention_items(study: Study) -> dict[str, Mapping[str, Any]]:
    """item id -> definition of every attention item in the study."""
    return {item["id"]: item for instrument in study.instruments.values() for item in instrument.items
            if item.get("type") == "attention"}


def attention_passed(item: Mapping[str, Any], value: Any) -> bool:
    return value == item["expected"]


def participant_quality(session: Session, study: Study) -> dict[int, dict[str, int]]:
    """user id -> pasted messages, pasted characters, focus losses, attention checks and failures."""
    result: dict[int, dict[str, int]] = defaultdict(lambda: {
        "pasted_messages": 0, "pasted_chars": 0, "focus_losses": 0, "attention_checks": 0, "attention_failures": 0})
    for user_id, pasted, focus in session.execute(
            select(Message.user_id, Message.pasted_chars, Message.focus_losses).where(Message.role == "user")):
        entry = result[user_id]
        entry["pasted_messages"] += 1 if pasted else 0
        entry["pasted_chars"] += pasted or 0
        entry["focus_losses"] += focus or 0
    items = attention_items(study)
    if items:
        for user_id, item_id, value in session.execute(
                select(QuestionnaireResponse.user_id, QuestionnaireResponse.item_id, QuestionnaireResponse.value)
                .where(QuestionnaireResponse.item_id.in_(list(items)))):
            entry = result[user_id]
            entry["attention_checks"] += 1
            entry["attention_failures"] += 0 if attention_passed(items[item_id], value) else 1
    return result
