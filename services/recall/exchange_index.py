"""A participant's consolidated exchanges as L4 (and S1) search them: the hybrid retriever over exchanges.

A memory is an *exchange*: the participant's message plus the assistant's reply to it, indexed with
its task tag and study day (``retrieval.exchange_text``), together with the exchanges just before it
in the same task (``neighbour_turns``), so "what did you recommend to me?" can find the
recommendation and a short answer carries the question it answered. The dense side uses the stored
passage vector of the participant's message (written at consolidation; no re-embedding).

Only rows that may be recalled (``admitted``: the recall-candidate rule) enter the retriever, so the
z-scores of the fusion are taken over the memories that can actually be recalled. Pure: numpy and the
retriever; the caller loads the rows and caches the index (building it tokenizes every exchange).
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from services.recall.parameters import RetrievalSettings
from services.recall.retrieval import HybridRetriever, RetrievalDoc, ScoredMemory, exchange_text, neighbour_text


@dataclass(frozen=True)
class Exchange:
    """One consolidated exchange as loaded for the index."""

    session_id: int  # the task session it belongs to (neighbours come from the same one)
    task_id: str
    day: int | None  # the study day of its task
    user_text: str
    reply: str | None


# A quoted message shorter than this is left in a reply ("ok" would match everywhere).
MIN_QUOTE_CHARS = 8


def without_quotes(reply: str | None, own: str, messages: Sequence[str]) -> str | None:
    """``reply`` without verbatim copies of the participant's other messages. A reply that quotes an earlier
    memory ("That reminds me, you told me: '…'") would otherwise match every later message about that
    memory on the lexical side, so the exchange is recalled for what another exchange said (an echo); the
    quoted message is indexed at its own exchange already."""
    if not reply:
        return reply
    for text in messages:
        if text != own and len(text) >= MIN_QUOTE_CHARS and text in reply:
            reply = reply.replace(text, " ")
    return reply


def index_texts(exchanges: Sequence[Exchange], neighbour_turns: int) -> tuple[list[str], list[str]]:
    """The index text of each exchange and the text of its neighbours (the previous ``neighbour_turns``
    exchanges of the same task session, in the given order); replies lose their quotes of the participant's
    other messages (``without_quotes``)."""
    texts, neighbours = [], []
    previous: dict[int, list[str]] = {}
    messages = sorted({e.user_text.strip() for e in exchanges if e.user_text}, key=len, reverse=True)
    for exchange in exchanges:
        reply = without_quotes(exchange.reply, exchange.user_text.strip(), messages)
        plain = exchange_text(exchange.user_text, reply)
        earlier = previous.setdefault(exchange.session_id, [])
        texts.append(exchange_text(exchange.user_text, reply, exchange.task_id, exchange.day))
        neighbours.append(neighbour_text(earlier, neighbour_turns))
        earlier.append(plain)
    return texts, neighbours


class ExchangeIndex:
    """The hybrid retriever over one participant's admitted exchanges; ranks return rows of the input."""

    def __init__(self, exchanges: Sequence[Exchange], vectors: np.ndarray, admitted: np.ndarray,
                 settings: RetrievalSettings) -> None:
        if len(exchanges) != len(vectors) or len(exchanges) != len(admitted):
            raise ValueError("exchanges, vectors and admitted must be aligned")
        self.session_ids = np.array([e.session_id for e in exchanges], dtype=np.int64)
        self.admitted = np.asarray(admitted, dtype=bool)
        texts, neighbours = index_texts(exchanges, settings.neighbour_turns)
        self.rows = np.flatnonzero(self.admitted)
        # per session: indexed rows (how many more to rank when excluding it) and rows the rule left out
        self._indexed = Counter(self.session_ids[self.rows].tolist())
        self._left_out = Counter(self.session_ids[~self.admitted].tolist())
        docs = [RetrievalDoc(int(row), texts[row], neighbours[row], vectors[row]) for row in self.rows]
        self.retriever = HybridRetriever(docs, settings.fusion, settings.k1, settings.b)

    def left_out(self, outside_session: int | None = None) -> int:
        """Exchanges the candidate rule kept out of the index, not counting those of ``outside_session``."""
        return self._left_out.total() - self._left_out.get(outside_session, 0)

    def rank(self, query_text: str, query_vector: np.ndarray, k: int,
             exclude_session: int | None = None) -> list[ScoredMemory]:
        """The ``k`` best admitted exchanges for a message, best first; ``memory_id`` is the row of the
        input. Exchanges of ``exclude_session`` (the message's own task) are never returned."""
        if k <= 0 or not len(self.rows):
            return []
        own = self._indexed.get(exclude_session, 0) if exclude_session is not None else 0
        ranked = self.retriever.rank(query_text, query_vector, k + own)
        return [s for s in ranked if self.session_ids[s.memory_id] != exclude_session][:k]
