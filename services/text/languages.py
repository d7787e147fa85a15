"""The languages the study speaks: participant texts and prompts exist in each of these."""
from __future__ import annotations

LANGUAGES: tuple[str, ...] = ("zh", "en")
DEFAULT_LANGUAGE = "zh"


def prompt_language(language: str | None, default: str = DEFAULT_LANGUAGE) -> str:
    """``language`` when the study speaks it, else ``default`` (Chinese unless the study says otherwise)."""
    return language if language in LANGUAGES else default
