"""Data-quality signals: how each message was typed, and instructed-response (attention) checks.

The participant page reports, with every message, the time from the first key
press, ``input`` or ``composition`` event (or paste) to sending (``typing_ms``),
the key presses, the ``input`` events and the finished input-method compositions
(``input_events``, ``composition_events``), the characters pasted, how often the
page lost focus since the previous message of the task, and the *input kind*:
where most of the text came from (``typed`` by key presses, ``composed`` through
an input method such as pinyin, ``pasted``, ``dictated`` i.e. inserted without a
key press or composition: voice dictation, autocomplete, an on-screen keyboard's
suggestion, or ``unknown``). They are optional (an API client may send none) and
validated here: a non-negative whole number under a cap that no person reaches in
one message, a known kind, or a 400.

A message is *implausibly typed* (``typing_flags``) when the characters typed into
the box (its length less the pasted ones) came faster than ``max_chars_per_second``
of typing, or with fewer than ``min_keystrokes_per_char`` key presses each: a
script posting text. Text is never flagged merely because it came without key
presses: dictated text, text of unknown origin and text reported with no key
presses are not judged, and composed text is judged by its speed only (an input
method commits many characters per key). Only messages with at least
``min_chars`` typed characters and reported signals are judged. The thresholds
are the study file's ``typing_checks``.

An attention item (``type: "attention"``) has one ``expected`` answer; any other
answer is a failed check. The monitor counts both per participant and its
filters flag pasted messages and failed checks.
"""
from __future__ import annotations

import difflib
import re
import unicodedata
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from database.models import Message, QuestionnaireResponse
from services.platform.errors import BadInput
from services.study.definition import Study, Timing, TypingChecks

TOO_FAST = "too_fast"
TOO_FEW_KEYSTROKES = "too_few_keystrokes"
# a message's content_flags: the first two keep it from counting towards the minimum engagement
TOO_LITTLE_CONTENT = "too_little_content"
NEAR_DUPLICATE = "near_duplicate"
PASTED_CLAMPED = "pasted_chars_clamped"
NOT_COUNTED = frozenset({TOO_LITTLE_CONTENT, NEAR_DUPLICATE})
NEAR_DUPLICATE_RATIO = 0.9  # difflib's similarity of the two texts' letters and digits
_COMPARED_CHARS = 1000  # near-duplicates are judged on the texts' starts (the ratio is quadratic)
_CJK = re.compile("[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\U00020000-\U0003134f]")
_WORD = re.compile(r"[^\W_]+")

TYPED, COMPOSED, PASTED, DICTATED, UNKNOWN = "typed", "composed", "pasted", "dictated", "unknown"
INPUT_KINDS = (TYPED, COMPOSED, PASTED, DICTATED, UNKNOWN)

# Upper bounds per message: a day of typing, and counts far beyond any 4000-character message.
SIGNAL_CAPS: dict[str, int] = {
    "typing_ms": 24 * 3600 * 1000,
    "keystrokes": 200_000,
    "pasted_chars": 1_000_000,
    "focus_losses": 10_000,
    "input_events": 200_000,
    "composition_events": 200_000,
}


def _visible(text: str) -> str:
    """The text as a reader sees it: NFKC, without format characters (zero-width spaces and joiners)."""
    return "".join(ch for ch in unicodedata.normalize("NFKC", text) if unicodedata.category(ch) != "Cf")


def _comparable(text: str) -> str:
    return "".join(ch for ch in _visible(text).casefold() if ch.isalnum())[:_COMPARED_CHARS]


def real_content(text: str, timing: Timing) -> bool:
    """Whether a message says something: ``min_message_words`` words or ``min_message_cjk_chars`` CJK
    characters (a mix counts in proportion: one word is worth two CJK characters by default)."""
    if not timing.min_message_words and not timing.min_message_cjk_chars:
        return True
    visible = _visible(text)
    cjk = len(_CJK.findall(visible))
    words = len(_WORD.findall(_CJK.sub(" ", visible)))
    score = (words / timing.min_message_words if timing.min_message_words else 0.0) + \
        (cjk / timing.min_message_cjk_chars if timing.min_message_cjk_chars else 0.0)
    return score >= 1.0


def near_duplicate(text: str, earlier: Sequence[str]) -> bool:
    """Whether ``text`` repeats one of ``earlier`` (the participant's messages in this task), letters and
    digits compared case-insensitively, at ``NEAR_DUPLICATE_RATIO`` similarity or more."""
    mine = _comparable(text)
    for other in earlier:
        theirs = _comparable(other)
        if mine == theirs or (mine and theirs and difflib.SequenceMatcher(None, mine, theirs).ratio()
                              >= NEAR_DUPLICATE_RATIO):
            return True
    return False


def content_flags(text: str, earlier: Sequence[str], timing: Timing) -> list[str]:
    """Why a user message does not count towards the minimum engagement ([]: it counts)."""
    if not real_content(text, timing):
        return [TOO_LITTLE_CONTENT]
    return [NEAR_DUPLICATE] if near_duplicate(text, earlier) else []


def counts_as_engagement(flags: list[str] | None) -> bool:
    return not (set(flags or ()) & NOT_COUNTED)


def clamp_pasted(signals: dict[str, int | None], text_chars: int) -> list[str]:
    """More characters pasted than the message holds (an edited paste, or a made-up figure): stored as the
    message's length, and flagged."""
    if signals.get("pasted_chars") is not None and signals["pasted_chars"] > text_chars:
        signals["pasted_chars"] = text_chars
        return [PASTED_CLAMPED]
    return []


def parse_signals(data: dict[str, Any]) -> dict[str, int | str | None]:
    """The optional quality fields of a chat message, validated; BadInput naming every bad one."""
    problems: dict[str, str] = {}
    signals: dict[str, int | str | None] = {}
    kind = data.get("input_kind")
    if kind is not None and kind not in INPUT_KINDS:
        problems["input_kind"] = "must be one of " + ", ".join(INPUT_KINDS)
    signals["input_kind"] = kind
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


def typing_flags(text_chars: int, typing_ms: int | None, keystrokes: int | None, pasted_chars: int | None,
                 checks: TypingChecks, input_kind: str | None = None) -> list[str] | None:
    """Why a user message's typing is implausible ([] when plausible); None when it is not judged: no
    signals reported, fewer typed characters than ``checks.min_chars``, or text that came without key
    presses (dictated, unknown, or no key presses and no composition), which is no sign of a script."""
    if typing_ms is None or keystrokes is None or input_kind in (DICTATED, UNKNOWN):
        return None
    if keystrokes == 0 and input_kind != COMPOSED:
        return None
    typed = text_chars - (pasted_chars or 0)
    if typed < checks.min_chars:
        return None
    flags = []
    if typed * 1000 > checks.max_chars_per_second * typing_ms:  # typing_ms 0: infinitely fast
        flags.append(TOO_FAST)
    if input_kind != COMPOSED and keystrokes < checks.min_keystrokes_per_char * typed:
        flags.append(TOO_FEW_KEYSTROKES)
    return flags


def typing_rates(text_chars: int, typing_ms: int | None, keystrokes: int | None,
                 pasted_chars: int | None) -> tuple[float | None, float | None]:
    """Typed (not pasted) characters per second of typing, and key presses per typed character;
    None where a signal is missing or the denominator is 0."""
    typed = text_chars - (pasted_chars or 0)
    per_second = typed * 1000 / typing_ms if typing_ms else None
    per_char = keystrokes / typed if keystrokes is not None and typed > 0 else None
    return per_second, per_char


def attention_items(study: Study) -> dict[str, Mapping[str, Any]]:
    """item id -> definition of every attention item in the study."""
    return {item["id"]: item for instrument in study.instruments.values() for item in instrument.items
            if item.get("type") == "attention"}


def attention_passed(item: Mapping[str, Any], value: Any) -> bool:
    return value == item["expected"]


def participant_quality(session: Session, study: Study) -> dict[int, dict[str, int]]:
    """user id -> pasted messages, pasted characters, focus losses, implausibly typed messages,
    attention checks and failures, messages that do not count towards the minimum engagement (too little
    content, near-duplicates) and messages whose pasted_chars were clamped."""
    result: dict[int, dict[str, int]] = defaultdict(lambda: {
        "pasted_messages": 0, "pasted_chars": 0, "focus_losses": 0, "implausible_typing_messages": 0,
        "attention_checks": 0, "attention_failures": 0, "low_content_messages": 0, "pasted_chars_clamped": 0})
    for user_id, pasted, focus, chars, typing_ms, keys, kind, flags in session.execute(
            select(Message.user_id, Message.pasted_chars, Message.focus_losses, func.length(Message.content),
                   Message.typing_ms, Message.keystrokes, Message.input_kind, Message.content_flags)
            .where(Message.role == "user")):
        entry = result[user_id]
        entry["low_content_messages"] += 0 if counts_as_engagement(flags) else 1
        entry["pasted_chars_clamped"] += 1 if PASTED_CLAMPED in (flags or ()) else 0
        pasted = min(pasted, chars) if pasted is not None else None  # rows stored before the clamp
        entry["pasted_messages"] += 1 if pasted else 0
        entry["pasted_chars"] += pasted or 0
        entry["focus_losses"] += focus or 0
        entry["implausible_typing_messages"] += 1 if typing_flags(chars, typing_ms, keys, pasted,
                                                                  study.typing_checks, kind) else 0
    items = attention_items(study)
    if items:
        for user_id, item_id, value in session.execute(
                select(QuestionnaireResponse.user_id, QuestionnaireResponse.item_id, QuestionnaireResponse.value)
                .where(QuestionnaireResponse.item_id.in_(list(items)))):
            entry = result[user_id]
            entry["attention_checks"] += 1
            entry["attention_failures"] += 0 if attention_passed(items[item_id], value) else 1
    return result
