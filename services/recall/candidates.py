"""Which consolidated messages are recall candidates (``CandidateRule``), and what a new message recalls with.

A message that carries no content - "好的，谢谢", "OK thanks", "do you remember me?" - is a
near-paraphrase of every other such message to an E5 embedder (cosine 0.92-0.94) and would be recalled
for small talk, so a message is a candidate only if it has a content word or a high emotional salience.
Content words use the jieba-based ``services.text.keywords``; nothing here imports Flask or the database.
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from functools import lru_cache
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from services.recall.formulas import clamp_score
from services.recall.word_lists import load_word_lists
from services.text.keywords import tokenize

# The word lists are data (data/recall/candidate_words.json): they decide what participants can be reminded
# of, so their hash is recorded with the rule (``CandidateRule.word_lists``) and with each reply's recall.
WORD_LISTS = load_word_lists("candidate_words")
_LISTS = WORD_LISTS.data
# Words that manage the conversation rather than say anything about the person; set phrases are taken out
# first, as whole phrases ("no worries" is not a worry, "没问题" not a problem).
CONVERSATIONAL_PHRASES = re.compile("".join(_LISTS["conversational_phrases"]), re.IGNORECASE)
CONVERSATIONAL_WORDS_ZH = frozenset(_LISTS["conversational_words"]["zh"])
CONVERSATIONAL_WORDS_EN = frozenset(_LISTS["conversational_words"]["en"])


@lru_cache(maxsize=65536)
def _content_words(text: str) -> tuple[str, ...]:
    return tuple(w for w in tokenize(CONVERSATIONAL_PHRASES.sub(" ", text))
                 if w not in CONVERSATIONAL_WORDS_ZH and w.lower() not in CONVERSATIONAL_WORDS_EN)


def forget_texts() -> None:
    """Empty the content-word caches, whose keys are message texts (after an erasure, or when a
    process drops participants it no longer serves)."""
    _content_words.cache_clear()
    _memory_words.cache_clear()
    _cue.cache_clear()


def content_words(text: str) -> list[str]:
    """The words of ``text`` that say something: ``services.text.keywords.tokenize`` (stop words removed)
    minus conversational phrases and words. Empty for "好的，谢谢！" or "Do you remember me?"."""
    return list(_content_words(text or ""))


# A question asking the assistant to remember ("你还记得我说过我大学学的什么专业吗？", "Do you remember
# which ingredient I can't have?") says nothing new about the person: what it asks about is in an
# earlier message, or was never said. Stored, its frame makes it a near-paraphrase of every other such
# question, so a later one recalled an earlier one (the seventh round's false recalls). Such a clause is
# not memory content; the clauses around it still are ("你还记得不 现在还是肿": 肿 counts).
_QUESTIONS = _LISTS["recall_question"]
_CLAUSES = re.compile(_QUESTIONS["clauses"])
_REMEMBER_ZH = re.compile(_QUESTIONS["remember_zh"])
_QUESTION_ZH = re.compile(_QUESTIONS["question_zh"])
_REMEMBER_EN = re.compile(_QUESTIONS["remember_en"], re.IGNORECASE)
_QUESTION_START_EN = re.compile(_QUESTIONS["english_question_start"])


def is_recall_question(clause: str) -> bool:
    """Whether one clause asks the assistant to remember something (and does nothing else)."""
    clause = clause.strip()
    if not clause:
        return False
    if _REMEMBER_ZH.search(clause):
        return bool(_QUESTION_ZH.search(clause))
    return bool(_REMEMBER_EN.search(clause)) and ("?" in clause or bool(_QUESTION_START_EN.match(clause)))


@lru_cache(maxsize=65536)
def _memory_words(text: str) -> tuple[str, ...]:
    parts = [part for part in _CLAUSES.split(text) if part.strip()]
    kept = [part for part in parts if not is_recall_question(part)]
    if len(kept) == len(parts):
        return _content_words(text)
    return tuple(w for part in kept for w in _content_words(part))


def memory_content_words(text: str) -> list[str]:
    """``content_words`` of a stored message without its clauses that ask the assistant to remember: what
    the message says about the person. Empty for "你还记得我老婆在哪上班吗？"."""
    return list(_memory_words(text or ""))


# The words of a clause that only frame it as a question asking to remember: "你还记得…吗", "记不记得",
# "Do you remember …?", "What did I tell you about …". ``recall_cue`` takes them out of a new message.
_FRAME_ZH = re.compile(_QUESTIONS["frame_zh"])
_FRAME_END_ZH = re.compile(_QUESTIONS["frame_end_zh"])
_FRAME_EN = re.compile(_QUESTIONS["frame_en"], re.IGNORECASE)


def _uncued(clause: str) -> str:
    if not is_recall_question(clause):
        return clause
    if _REMEMBER_ZH.search(clause):
        return _FRAME_END_ZH.sub("", _FRAME_ZH.sub("", clause))
    return _FRAME_EN.sub("", clause)


@lru_cache(maxsize=65536)
def _cue(text: str) -> str:
    parts = _CLAUSES.split(text)
    cue = "".join(_uncued(part) for part in parts)
    return cue if cue != text and _content_words(cue) else text


def recall_cue(text: str) -> str:
    """The text a new message recalls with: the message without the words that only frame a clause as a
    question asking to remember ("你还记得我家那个小胖子叫啥吗？" cues with "我家那个小胖子叫啥？").

    The frame says nothing about what is asked, but it is the same in every such question, so embedded
    whole, one such question lies close to any other stored one (the false recalls of the seventh round's
    development participants, docs/recall_calibration.md, eighth round). The message itself is stored
    and answered unchanged; a message left without content words by this cues with its whole text."""
    return _cue(text or "")


@dataclass(frozen=True)
class CandidateRule:
    """Which consolidated user messages may be recalled at all, and which new messages recall.

    A stored message is a candidate when it has at least ``min_content_words`` content words
    (``content_words``; with ``recall_questions`` false, not counting the clauses that ask the
    assistant to remember: ``memory_content_words``) or, whatever its words, an emotional salience of
    at least ``min_salience`` (None: salience alone never admits). ``min_content_words = 0`` admits
    every consolidated message, as the seed's wording does. A new message that asks to remember
    still recalls (``admits_query`` counts all its words)."""

    min_content_words: int = 1
    min_salience: float | None = 0.5
    recall_questions: bool = False  # whether a question asking to remember is itself a memory
    # the hash of the word lists this rule decides with (data/recall/candidate_words.json), recorded with
    # every reply's recall parameters; not configurable: the study file cannot name other lists
    word_lists: str = WORD_LISTS.sha256

    def memory_word_count(self, text: str) -> int:
        """The content words a stored message counts with under this rule."""
        return len(content_words(text) if self.recall_questions else memory_content_words(text))

    def admits(self, content_word_count: ArrayLike, salience: ArrayLike) -> bool | np.ndarray:
        words = np.asarray(content_word_count)
        admitted = words >= self.min_content_words
        if self.min_salience is not None:
            admitted = admitted | (np.asarray(salience, dtype=np.float64) >= self.min_salience)
        return bool(admitted) if np.ndim(admitted) == 0 else admitted

    def admits_text(self, text: str, salience: float | None) -> bool:
        """The rule for one stored message (a missing salience counts as 0)."""
        return bool(self.admits(self.memory_word_count(text), clamp_score(salience)))

    def admits_query(self, text: str) -> bool:
        """Whether a new message may recall anything: it needs content words too (its salience is not
        known before consolidation). "好的，谢谢" is about nothing, so nothing is relevant to it."""
        return len(content_words(text)) >= self.min_content_words

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def candidate_rule_from_config(raw: Mapping[str, Any] | None) -> CandidateRule:
    """The rule from ``memory.recall.candidates`` (or from a reply's recorded ``recall_params.candidates``);
    None: the documented default. The rule decides with this process's word lists, whatever a recorded
    ``word_lists`` hash says."""
    if raw is None:
        return CandidateRule()
    rule = CandidateRule(min_content_words=int(raw.get("min_content_words", 1)),
                         min_salience=None if raw.get("min_salience") is None else float(raw["min_salience"]),
                         recall_questions=bool(raw.get("recall_questions", False)))
    if rule.min_content_words < 0:
        raise ValueError("recall candidates.min_content_words must be 0 or more")
    if rule.min_salience is not None and not 0.0 <= rule.min_salience <= 1.0:
        raise ValueError("recall candidates.min_salience must lie in [0, 1] (or be null)")
    return rule
