"""The languages the study speaks, and the one rule that says which of them a text is in.

Participant texts and prompts exist in each of ``LANGUAGES``. ``detect`` is the only language detector in the
code base: profile extraction, summaries, the offline reply, recall's relevance mapping and keyword extraction
all ask it, so a mixed message ("I'm allergic to 海鲜") is one language everywhere.
"""
from __future__ import annotations

import re
from collections.abc import Iterable

LANGUAGES: tuple[str, ...] = ("zh", "en")
DEFAULT_LANGUAGE = "zh"

# CJK Unified Ideographs, Extension A and the compatibility block: every Han character a participant types
CJK_CHAR = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
LATIN_WORD = re.compile(r"[A-Za-z]+")


def prompt_language(language: str | None, default: str = DEFAULT_LANGUAGE) -> str:
    """``language`` when the study speaks it, else ``default`` (Chinese unless the study says otherwise)."""
    return language if language in LANGUAGES else default


def script_counts(text: str) -> tuple[int, int]:
    """(Chinese characters, Latin-letter words) in ``text``."""
    return len(CJK_CHAR.findall(text or "")), len(LATIN_WORD.findall(text or ""))


def detect(text: str | Iterable[str], default: str | None = None) -> str | None:
    """``"zh"`` or ``"en"`` by script; ``default`` for a text with neither (emoji, digits, empty).

    The rule: Chinese when its characters at least match the Latin words in number (a Chinese word is one to
    three characters, so a sentence that is half Chinese by meaning is Chinese), else English. A list of texts
    is judged as one text.
    """
    joined = text if isinstance(text, str) else " ".join(text)
    cjk, latin = script_counts(joined)
    if not cjk and not latin:
        return default
    return "zh" if cjk >= latin else "en"


def has_cjk(text: str) -> bool:
    return CJK_CHAR.search(text or "") is not None
