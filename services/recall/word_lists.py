"""The word lists recall decides with, read from ``data/recall/<name>.json``, and their hash.

Word lists decide what participants can be reminded of (``candidate_words``: which messages carry
content) and how salient a message is without the model's scores (``salience_lexicon``), so they are
data, not code: editing one changes its hash, which is recorded with every L4 reply's recall parameters
(``CandidateRule.word_lists``, ``recall_params.word_lists``) and in the audit of each study version, as
the study definition's own hash is.
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

WORD_LIST_DIR = Path(__file__).resolve().parents[2] / "data" / "recall"
WORD_LIST_NAMES = ("candidate_words", "salience_lexicon", "memory_requests")
# Prose about a list, not part of it: editing it changes no decision, so it is left out of the hash.
_PROSE_KEYS = ("about", "notes")


@dataclass(frozen=True)
class WordLists:
    name: str
    data: Mapping[str, Any]
    sha256: str  # of the lists' canonical JSON, without the prose


def lists_hash(data: Mapping[str, Any]) -> str:
    """A stable hash of a word-list file's lists: the same lists give the same hash in any process."""
    lists = {k: v for k, v in data.items() if k not in _PROSE_KEYS}
    canonical = json.dumps(lists, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


@cache
def load_word_lists(name: str) -> WordLists:
    """The word lists ``data/recall/<name>.json`` (read once per process)."""
    if name not in WORD_LIST_NAMES:
        raise ValueError(f"unknown word list {name!r}; known: {', '.join(WORD_LIST_NAMES)}")
    data = json.loads((WORD_LIST_DIR / f"{name}.json").read_text(encoding="utf-8"))
    return WordLists(name=name, data=data, sha256=lists_hash(data))


def word_list_hashes() -> dict[str, str]:
    """Each word list's hash, by name: what the audit records beside the study definition's hash."""
    return {name: load_word_lists(name).sha256 for name in WORD_LIST_NAMES}
