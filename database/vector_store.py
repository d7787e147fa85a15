"""Forgetting-curve recall over a participant's consolidated messages (L4).

``VectorStore.recall`` scores the new user message against every consolidated
user message of the participant's earlier tasks in one matrix product, keeps
the ``top_k`` most similar as candidates, applies the forgetting curve of
``services.recall_model`` to them, updates the recalled memories
(``consolidation_g``, ``recall_count``, ``last_recall_at``) and writes one
``RecallEvent`` per candidate. It flushes but never commits: the caller owns
the transaction.

Only memories that carry content are candidates (``RecallParams.candidates``,
docs/recall_calibration.md): a message without content words and with low
salience ("好的，谢谢", "OK thanks") is skipped, and a new message without
content words recalls nothing. Both are counted on the store after each recall
(``last_excluded``, ``last_query_content_free``) so the memory context can say so.

Vectors of different embedding models live in different spaces, so only
memories embedded by the current embedder's model are compared; others are
skipped with a warning (or refused with ``ForeignEmbeddingError``).

Loading a participant's vectors dominates the cost of a recall (70-120 ms for
10,000 memories on SQLite, against under 1 ms of scoring; docs/benchmarks.md), so the matrix is cached per
process. Before every use two index-backed checks decide whether it is still
current, seeing writes from any process (e.g. ``scripts/manual_consolidation.py``):
the participant's consolidation runs (count, newest, last start/finish) and
whether a consolidated message newer than the cached ones exists. The candidate
rows are then read fresh (g, last recall, salience) and checked against the
cached vectors, so a deleted or re-embedded candidate forces a reload. Code
that rewrites stored embeddings outside a consolidation run should still call
``VectorStore.invalidate(user_id)``: a changed memory outside the top-k is only
noticed once it becomes a candidate.
"""
from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

import numpy as np
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from database.models import ConsolidationRun, Message, RecallEvent
from services import recall_model as rm
from services.embedding_service import from_blob, normalise
from services.memory.exchange_index import Exchange, ExchangeIndex

logger = logging.getLogger(__name__)

FOREIGN_VECTOR_POLICIES = ("skip", "raise")
_EPOCH = datetime(1970, 1, 1)
_warned_mismatches: set[tuple[Any, ...]] = set()  # (preset, calibrated model, embedder model), warned once


class ForeignEmbeddingError(RuntimeError):
    """The participant has memories embedded by another model than the current embedder's."""


def cosine_scores(matrix: np.ndarray, query: np.ndarray) -> np.ndarray:
    """Cosine of every stored (normalised) vector with the query, in one product.

    einsum computes it in the calling thread; a BLAS matrix-vector product would be
    split over threads, and on the study's 2-core server, shared with request threads,
    that turns a sub-millisecond product into a tail of 10 ms and more (docs/benchmarks.md)."""
    return np.einsum("ij,j->i", matrix, query)


@dataclass
class RecallCandidate:
    """One of the top-k memories considered for a query, recalled or not."""

    message_id: int
    task_id: str
    text: str
    cosine: float
    r: float
    t: float
    g_before: float
    g_after: float
    p: float
    p_final: float
    salience: float
    recalled: bool
    rank: int
    at: datetime | None = None  # when the recall was computed
    reply: str | None = None  # the assistant's reply: the memory is the exchange
    fused: float | None = None  # the hybrid retriever's scores (services.memory.retrieval)
    lexical_z: float | None = None
    dense_z: float | None = None

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["at"] = self.at.isoformat() if self.at else None
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RecallCandidate:
        values = dict(data)
        values["at"] = datetime.fromisoformat(values["at"]) if values.get("at") else None
        return cls(**values)


@dataclass(frozen=True)
class _ParticipantMatrix:
    runs_state: tuple[Any, ...]  # the participant's consolidation runs when loaded
    max_id: int  # newest consolidated message of any model when loaded
    foreign: dict[str, int]  # other embedding models -> memories left out
    message_ids: np.ndarray  # int64, ascending
    task_session_ids: np.ndarray  # int64, aligned with message_ids
    matrix: np.ndarray  # float32 (n, dim), rows L2-normalised
    content_words: np.ndarray  # int64, content words of each memory (recall_model.content_words)
    salience: np.ndarray  # float64, emotional salience of each memory (missing -> 0)
    index: ExchangeIndex  # the hybrid retriever over the admitted exchanges
    replies: list[str | None]  # the reply of each memory


class VectorStore:
    # Process-wide cache of participants' matrices: (database, user, model) -> matrix.
    _cache: OrderedDict[tuple[Any, ...], _ParticipantMatrix] = OrderedDict()
    _cache_lock = threading.Lock()
    cache_participants = 256

    def __init__(self, session: Session, study: dict[str, Any], *, clock, day_seconds: float, embedder,
                 params: rm.RecallParams | None = None, use_cache: bool = True,
                 on_foreign_vectors: str = "skip") -> None:
        if on_foreign_vectors not in FOREIGN_VECTOR_POLICIES:
            raise ValueError(f"on_foreign_vectors must be one of {FOREIGN_VECTOR_POLICIES}")
        if day_seconds <= 0:
            raise ValueError("day_seconds must be positive")
        self.session = session
        self.study = study
        self.clock = clock
        self.day_seconds = float(day_seconds)
        self.embedder = embedder
        self.params = params or rm.resolve_recall_params(study)
        self.retrieval = rm.resolve_retrieval(study)
        self.task_days = {t["id"]: int(t["unlock_offset_days"]) for t in study.get("tasks", [])}
        self.salience_weights = study["memory"].get("salience_weights")
        self.use_cache = use_cache
        self.on_foreign_vectors = on_foreign_vectors
        self.last_skipped_foreign = 0  # memories of other models left out by the latest recall
        self.last_excluded = 0  # memories of earlier tasks the candidate rule left out of the latest recall
        self.last_query_content_free = False  # the latest query had no content words, so recalled nothing
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
        nothing is written: the caller hands the candidates to ``apply`` later (the chat
        writes them with the reply, so no write lock is held while the model answers, and a
        reply that fails leaves no recall behind)."""
        if query_message.id is None:
            self.session.add(query_message)
            self.session.flush()
        self.last_excluded = 0
        self.last_query_content_free = not self.params.candidates.admits_query(query_message.content)
        if self.last_query_content_free:
            return []
        found = self._candidates(user_id, query_message, query_vector, reload=False)
        if found is None:  # the cached matrix is stale: read it again
            found = self._candidates(user_id, query_message, query_vector, reload=True)
        if found is None:
            raise RuntimeError(f"recall candidates of participant {user_id} vanished while being read")
        memories, ranked, replies = found
        if not memories:
            return []
        cosines = np.array([s.cosine for s in ranked], dtype=np.float64)
        scores = {name: np.array([getattr(s, name) for s in ranked], dtype=np.float64)
                  for name in ("fused", "lexical_z", "dense_z")}
        now = self.clock.now()
        references = [m.last_recall_at or m.created_at for m in memories]
        salience = np.array([self._salience(m) for m in memories])
        g_before = np.array([
            m.consolidation_g if m.consolidation_g is not None
            else rm.initial_g(e, self.params.g0_base, self.params.g0_salience)
            for m, e in zip(memories, salience, strict=True)
        ], dtype=np.float64)
        t = np.atleast_1d(rm.elapsed_time(
            np.array([(now - ref).total_seconds() for ref in references]),
            unit=self.params.time_unit, time_scale=self.params.time_scale, day_seconds=self.day_seconds,
            turns=self._turns_since(user_id, references, now) if self.params.time_unit == "turns" else None,
        ))
        result = rm.score_candidates(cosines, t, g_before, salience, self.params,
                                     rm.text_language(query_message.content), scores)
        candidates = [
            RecallCandidate(
                message_id=memory.id, task_id=memory.task_id, text=memory.content,
                cosine=float(cosines[i]), r=float(result.r[i]), t=float(t[i]),
                g_before=float(g_before[i]), g_after=float(result.g_after[i]), p=float(result.p[i]),
                p_final=float(result.p_final[i]), salience=float(salience[i]), recalled=bool(result.recalled[i]),
                rank=i + 1, at=now, reply=replies[i], fused=float(scores["fused"][i]),
                lexical_z=float(scores["lexical_z"][i]), dense_z=float(scores["dense_z"][i]),
            )
            for i, memory in enumerate(memories)
        ]
        if apply:
            self.apply(candidates, user_id=user_id, query_message_id=query_message.id, task_id=task_id)
        return candidates

    def apply(self, candidates: list[RecallCandidate], *, user_id: int, query_message_id: int,
              task_id: str) -> None:
        """Write a recall: update g, recall_count and last_recall_at of the recalled memories and
        store one RecallEvent per candidate. Flushes; the caller commits."""
        for candidate in candidates:
            if candidate.recalled:
                memory = self.session.get(Message, candidate.message_id)
                memory.consolidation_g = candidate.g_after
                memory.recall_count = (memory.recall_count or 0) + 1
                memory.last_recall_at = candidate.at
            self.session.add(RecallEvent(
                user_id=user_id, query_message_id=query_message_id, memory_message_id=candidate.message_id,
                task_id=task_id, rank=candidate.rank, cosine=candidate.cosine, r=candidate.r, t=candidate.t,
                g_before=candidate.g_before, g_after=candidate.g_after, p=candidate.p,
                p_final=candidate.p_final, salience=candidate.salience, recalled=candidate.recalled,
                created_at=candidate.at,
            ))
        self.session.flush()

    @classmethod
    def invalidate(cls, user_id: int | None = None) -> None:
        """Drop cached matrices (one participant's, or all): after rewriting stored embeddings outside a
        consolidation run, or to free memory after a participant's data is deleted."""
        with cls._cache_lock:
            for key in [k for k in cls._cache if user_id is None or k[1] == user_id]:
                del cls._cache[key]

    # -- internals ----------------------------------------------------------

    def _candidates(self, user_id: int, query_message: Message, query_vector: np.ndarray | None, *,
                    reload: bool) -> tuple[list[Message], list[Any], list[str | None]] | None:
        """The top-k memories by the hybrid retriever (rows of this session), their scores and replies.

        None when a candidate row no longer matches the matrix (deleted, re-embedded, or the
        database was rebuilt under the same URL), so the caller reloads."""
        store = self._participant_matrix(user_id, reload=reload)
        if store.matrix.shape[0] == 0:
            return [], [], []
        query = self._query_vector(query_message, query_vector, store.matrix.shape[1])
        own_session = store.task_session_ids == query_message.task_session_id
        self.last_excluded = int((~store.index.admitted & ~own_session).sum())
        ranked = store.index.rank(query_message.content, query, self.params.top_k,
                                  exclude_session=query_message.task_session_id)
        chosen = np.array([s.memory_id for s in ranked], dtype=np.int64)
        ids = [int(i) for i in store.message_ids[chosen]]
        rows = {m.id: m for m in self.session.scalars(select(Message).where(Message.id.in_(ids)))} if ids else {}
        for message_id, index in zip(ids, chosen, strict=True):
            row = rows.get(message_id)
            if (row is None or row.user_id != user_id or row.role != "user" or row.consolidated_at is None
                    or row.embedding is None or row.embedding_model != self.embedder.model
                    or len(row.embedding) != store.matrix.shape[1] * 4
                    or not np.allclose(normalise(from_blob(row.embedding))[0], store.matrix[index], atol=1e-6)):
                return None
        return [rows[i] for i in ids], ranked, [store.replies[int(i)] for i in chosen]

    def _query_vector(self, query_message: Message, query_vector: np.ndarray | None, dim: int) -> np.ndarray:
        if query_vector is None:
            query_vector = self.embedder.embed_queries([query_message.content])[0]
        vector = normalise(np.asarray(query_vector, dtype=np.float32).reshape(-1))[0]
        if vector.shape[0] != dim:
            raise ValueError(f"query vector has {vector.shape[0]} dimensions, stored memories have {dim}")
        return vector

    def _salience(self, memory: Message) -> float:
        if memory.emotional_salience is not None:
            return rm.clamp_score(memory.emotional_salience)
        return rm.emotional_salience(memory.emotional_intensity, memory.self_disclosure, memory.value_relevance,
                                     weights=self.salience_weights)

    def _consolidated(self, user_id: int) -> tuple[Any, ...]:
        return (Message.user_id == user_id, Message.role == "user", Message.embedding.is_not(None),
                Message.consolidated_at.is_not(None))

    def _runs_state(self, user_id: int) -> tuple[Any, ...]:
        """Changes whenever a consolidation run of the participant starts, finishes or fails."""
        row = self.session.execute(
            select(func.count(ConsolidationRun.id), func.max(ConsolidationRun.id),
                   func.max(func.coalesce(ConsolidationRun.finished_at, ConsolidationRun.started_at)))
            .where(ConsolidationRun.user_id == user_id)
        ).one()
        return tuple(str(v) for v in row)

    def _has_newer_consolidated(self, user_id: int, max_id: int) -> bool:
        """Whether a memory newer than the cached ones exists: a range scan over the (user_id, id)
        index that only reaches messages written since the matrix was loaded."""
        return self.session.execute(
            select(Message.id).where(*self._consolidated(user_id), Message.id > max_id).limit(1)
        ).first() is not None

    def _participant_matrix(self, user_id: int, *, reload: bool = False) -> _ParticipantMatrix:
        model = self.embedder.model
        # the index bakes in the candidate rule and the retrieval settings, so they are part of the key
        key = (str(self.session.get_bind().url), user_id, model, self.params.candidates, self.retrieval)
        runs = self._runs_state(user_id)
        store = None
        if self.use_cache and not reload:
            with self._cache_lock:
                store = self._cache.get(key)
            if store is not None and (store.runs_state != runs or self._has_newer_consolidated(user_id, store.max_id)):
                store = None
        if store is None:
            store = self._load_matrix(user_id, model, runs)
            if self.use_cache:
                with self._cache_lock:
                    self._cache[key] = store
                    self._cache.move_to_end(key)
                    while len(self._cache) > self.cache_participants:
                        self._cache.popitem(last=False)
        self.last_skipped_foreign = sum(store.foreign.values())
        if store.foreign:
            detail = ", ".join(f"{n} by {m!r}" for m, n in sorted(store.foreign.items()))
            message = (f"participant {user_id} has memories embedded by another model ({detail}); the current "
                       f"embedder is {model!r} and vectors of different models are never compared")
            if self.on_foreign_vectors == "raise":
                raise ForeignEmbeddingError(message)
            logger.warning("%s: they are left out of recall until re-embedded", message)
        return store

    def _load_matrix(self, user_id: int, model: str, runs: tuple[Any, ...]) -> _ParticipantMatrix:
        rows = self.session.execute(
            select(Message.id, Message.task_session_id, Message.task_id, Message.embedding_model, Message.embedding,
                   Message.content,
                   Message.emotional_salience, Message.emotional_intensity, Message.self_disclosure,
                   Message.value_relevance)
            .where(*self._consolidated(user_id)).order_by(Message.id)
        ).all()
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
        content_words = np.array([len(rm.content_words(r.content)) for r in own], dtype=np.int64)
        salience = np.array([self._salience(r) for r in own], dtype=np.float64)
        replies = self._replies(user_id)
        exchanges = [Exchange(r.task_session_id, r.task_id, self.task_days.get(r.task_id), r.content, replies.get(r.id))
                     for r in own]
        admitted = np.asarray(self.params.candidates.admits(content_words, salience), dtype=bool).reshape(-1)
        return _ParticipantMatrix(
            runs_state=runs,
            max_id=max((r.id for r in rows), default=0),
            foreign=foreign,
            message_ids=np.array([r.id for r in own], dtype=np.int64),
            task_session_ids=np.array([r.task_session_id for r in own], dtype=np.int64),
            matrix=matrix, content_words=content_words, salience=salience,
            index=ExchangeIndex(exchanges, matrix, admitted, self.retrieval),
            replies=[e.reply for e in exchanges],
        )

    def _replies(self, user_id: int) -> dict[int, str]:
        """The assistant's reply to each of the participant's messages (the latest, if it was regenerated)."""
        rows = self.session.execute(
            select(Message.reply_to_id, Message.content).where(
                Message.user_id == user_id, Message.role == "assistant", Message.reply_to_id.is_not(None))
            .order_by(Message.id)
        ).all()
        return {r.reply_to_id: r.content for r in rows}

    def _turns_since(self, user_id: int, references: list[datetime], now: datetime) -> np.ndarray:
        """For each reference time, the participant's user messages sent after it, up to now."""
        sent = self.session.scalars(
            select(Message.created_at).where(Message.user_id == user_id, Message.role == "user",
                                             Message.created_at > min(references), Message.created_at <= now)
        ).all()
        stamps = np.sort(np.array([(s - _EPOCH).total_seconds() for s in sent], dtype=np.float64))
        refs = np.array([(r - _EPOCH).total_seconds() for r in references], dtype=np.float64)
        return (stamps.size - np.searchsorted(stamps, refs, side="right")).astype(np.float64)
