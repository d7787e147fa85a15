"""Directed retrieval: an explicit request to remember brings back the clear best match, below the decay bar.

The forgetting curve models incidental cueing: a message reminds L4 of an earlier one when the two are
related enough for the memory's age. A participant who asks "do you remember what breed he is?" or
"你还记得我家狗叫什么吗？" is not cued by chance but searching on purpose; the retrieval is intentional
(the retrieval mode: Tulving, 1983; Rugg & Wilding, 2000), and people then bring back a memory that an
incidental cue of the same strength would not. L4 models that as a second decision on the scored
candidates, after the curve (``services.recall.scoring.direct_recall``):

- the message is an explicit request to remember (``data/recall/memory_requests.json``, in the message's
  language as ``services.text.languages.detect`` says);
- the best-ranked candidate was not recalled by the curve, and is not itself a request to remember (an
  earlier "do you remember…?" resembles the new one by its frame, and says nothing about the person);
- its relevance r is at least ``min_r`` (a question about something never said has no relevant memory:
  its best candidate is an unrelated one, of low r);
- and it leads the second-ranked candidate by at least ``min_margin`` in r (the request must single out one
  memory, not any of several equally weak ones).

Then that one candidate is recalled, and consolidated as any recall is (g updated by the spacing gain).
This module holds the rule and the request phrases; nothing here touches the database.
"""
from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any

from services.recall.word_lists import load_word_lists

# Data, not code (data/recall/memory_requests.json); its hash goes with each reply's recall parameters.
WORD_LISTS = load_word_lists("memory_requests")
_REQUESTS = {lang: re.compile(WORD_LISTS.data[lang], re.IGNORECASE) for lang in ("en", "zh")}


@dataclass(frozen=True)
class DirectedRetrieval:
    """``memory.recall.directed_retrieval``: whether an explicit request to remember may bring back its clear
    best match below the decay bar, and how clear it must be (``min_r``, ``min_margin``: in r)."""

    enabled: bool = False  # absent from a study file: off (the default study turns it on)
    min_r: float = 0.6
    min_margin: float = 0.1
    word_lists: str = WORD_LISTS.sha256  # the request phrases decided with, recorded with each reply

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def memory_request(text: str, language: str | None) -> str | None:
    """The words of ``text`` that ask the assistant to remember ("do u remember", "还记得"), or None.
    ``language``: the message's, by the one detector; a message of neither language asks nothing."""
    pattern = _REQUESTS.get(language or "")
    match = pattern.search(text or "") if pattern else None
    return match.group(0) if match else None
