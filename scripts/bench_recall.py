"""Benchmark L4 recall over many stored memories of one participant.

Builds a temporary SQLite database with the real migrated schema, stores
``--memories`` consolidated exchanges for one participant (a user message of 12
words from a 3,000-word vocabulary with a random unit vector, 384 dimensions, and
an assistant reply of 10 words; the tokenizer splits "word17" into "word" and "17",
so one term is in every memory), and times, with the query vector precomputed so
the embedding is excluded:

  (a) the full ``ForgettingCurveSearch.recall`` (cached index, hybrid retriever top-k,
      one query for the candidate rows and the cache's freshness state, calibrated
      relevance, forgetting curve, the UPDATE of the recalled memories and the INSERT of
      the RecallEvent rows: what a reply does for recall, apart from embedding the
      query), with the participant's index cached (warm) and without the cache (every
      call reloads and re-indexes); the first recall of a cold cache is timed once;
  (b) the ranking and scoring core alone (BM25 over exchange + neighbours, cosine
      product, z-score fusion, top-k, relevance model, curve).

Wall-clock time is reported as p50/p95/p99; for the warm recall also the CPU time of
the calling thread (``time.thread_time``), which a busy machine does not inflate, so a
tail that is waiting for a core shows as wall >> CPU. The load average is printed
before and after. Each timed recall is rolled back afterwards so every iteration sees
the same state.

    .venv/bin/python scripts/bench_recall.py [--memories 10000] [--repeat 300]

Results are recorded in docs/benchmarks.md ("Recall").
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np
from sqlalchemy import func, insert, select

from config import SECONDS_PER_DAY
from database.db_manager import Database
from database.models import Message, TaskSession, User
from services.llm.embedding_service import to_blob
from services.memory.hybrid import ForgettingCurveSearch
from services.platform.clock import ManualClock
from services.recall.parameters import RecallParams
from services.recall.scoring import score_candidates
from services.study.definition import Study, load_study

DIM = 384
PLANTED = 3  # memories close to the query, so the recall path with updates is exercised
VOCABULARY = 3000
QUERY_TEXT = "word17 word250 word1999 word42 word7 word2500 word3 word999"


class PrecomputedQueryEmbedder:
    """Names the model the stored vectors carry; the benchmark always passes the query vector."""

    name = "bench"
    model = "bench/random-unit-384"
    dim = DIM

    def embed_queries(self, texts: list[str]) -> np.ndarray:
        raise RuntimeError("the benchmark passes a precomputed query vector")

    embed_passages = embed_queries


def build_database(url: str, memories: int, seed: int = 7) -> tuple[int, int, np.ndarray, datetime]:
    """One participant with ``memories`` consolidated T1 messages and a T2 query; returns
    (user id, query message id, query vector, now)."""
    rng = np.random.default_rng(seed)
    db = Database(url)
    db.upgrade()
    start = datetime(2026, 3, 2, 9, 0, 0)
    now = start + timedelta(days=2)
    query = rng.normal(size=DIM).astype(np.float32)
    query /= np.linalg.norm(query)
    vectors = rng.normal(size=(memories, DIM)).astype(np.float32)
    vectors[:PLANTED] = query + 0.05 * vectors[:PLANTED] / np.linalg.norm(vectors[:PLANTED], axis=1, keepdims=True)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    salience = rng.uniform(0, 1, size=memories)

    def words(n: int) -> str:
        return " ".join(f"word{w}" for w in rng.integers(0, VOCABULARY, size=n))
    with db.session() as session:
        user = User(username="bench", password_hash="-", participant_code="B0001", created_at=start)
        session.add(user)
        session.flush()
        t1 = TaskSession(user_id=user.id, task_id="T1", status="done", started_at=start, last_activity_at=start)
        t2 = TaskSession(user_id=user.id, task_id="T2", started_at=now, last_activity_at=now)
        session.add_all([t1, t2])
        session.flush()
        # Each message followed by its reply, as a chat stores them (ids interleave, which the staleness
        # check's range scan over newer ids relies on).
        first = (session.scalar(select(func.max(Message.id))) or 0) + 1
        rows = []
        for i in range(memories):
            user_id, reply_id = first + 2 * i, first + 2 * i + 1
            rows.append({
                "id": user_id, "user_id": user.id, "task_session_id": t1.id, "task_id": "T1", "role": "user",
                "content": words(12), "created_at": start + timedelta(seconds=i), "embedding": to_blob(vectors[i]),
                "embedding_model": PrecomputedQueryEmbedder.model, "emotional_salience": float(salience[i]),
                "consolidation_g": 1.0 + 0.5 * float(salience[i]), "recall_count": 0,
                "consolidated_at": start + timedelta(hours=1),
            })
            rows.append({
                "id": reply_id, "user_id": user.id, "task_session_id": t1.id, "task_id": "T1", "role": "assistant",
                "content": words(10), "created_at": start + timedelta(seconds=i, milliseconds=500),
                "reply_to_id": user_id,
            })
        # insert() with rows of different keys would fill the missing ones with NULL per statement: one per role
        session.execute(insert(Message), [r for r in rows if r["role"] == "user"])
        session.execute(insert(Message), [r for r in rows if r["role"] == "assistant"])
        query_message = Message(user_id=user.id, task_session_id=t2.id, task_id="T2", role="user",
                                content=QUERY_TEXT, created_at=now)
        session.add(query_message)
        session.flush()
        user_id, query_id = user.id, query_message.id
    db.dispose()
    return user_id, query_id, query, now


def _summary(samples_ms: list[float]) -> dict[str, float]:
    ordered = sorted(samples_ms)

    def quantile(q: float) -> float:
        return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]
    return {"p50": statistics.median(ordered), "p95": quantile(0.95), "p99": quantile(0.99),
            "mean": statistics.fmean(ordered), "n": len(ordered)}


def time_recall(db: Database, study: Study, params: RecallParams, user_id: int, query_id: int, query: np.ndarray,
                now: datetime, *, use_cache: bool, repeat: int,
                warmup: int = 0) -> tuple[dict[str, float], dict[str, float], int]:
    """Wall-clock and thread CPU summaries (ms) of ``repeat`` recalls, and how many memories the last recalled."""
    clock = ManualClock(now)
    samples, cpu, recalled = [], [], 0
    for iteration in range(warmup + repeat):
        with db.Session() as session:
            store = ForgettingCurveSearch(session, params, clock=clock, day_seconds=SECONDS_PER_DAY,
                                          embedder=PrecomputedQueryEmbedder(), use_cache=use_cache,
                                          retrieval=study.memory.retrieval,
                                          task_days={t.id: int(t.unlock_offset_days) for t in study.tasks})
            query_message = session.get(Message, query_id)
            started, cpu_started = time.perf_counter(), time.thread_time()
            candidates = store.recall(user_id=user_id, query_message=query_message, query_vector=query, task_id="T2")
            if iteration >= warmup:
                samples.append((time.perf_counter() - started) * 1000)
                cpu.append((time.thread_time() - cpu_started) * 1000)
            recalled = sum(c.recalled for c in candidates)
            session.rollback()
    return _summary(samples), _summary(cpu), recalled


def time_core(index, query: np.ndarray, params: RecallParams, repeat: int) -> dict[str, float]:
    rng = np.random.default_rng(3)
    n = len(index.admitted)
    t_all, g_all, e_all = rng.uniform(0, 0.5, size=n), rng.uniform(1.0, 1.5, size=n), rng.uniform(0, 1, size=n)
    samples = []
    for _ in range(repeat):
        started = time.perf_counter()
        ranked = index.rank(QUERY_TEXT, query, params.top_k)
        chosen = np.array([s.memory_id for s in ranked])
        scores = {name: np.array([getattr(s, name) for s in ranked]) for name in ("fused", "lexical_z", "dense_z")}
        score_candidates(np.array([s.cosine for s in ranked]), t_all[chosen], g_all[chosen], e_all[chosen],
                         params, "en", scores, spacing_days=t_all[chosen] / params.time_scale)
        samples.append((time.perf_counter() - started) * 1000)
    return _summary(samples)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memories", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=300)
    args = parser.parse_args(argv)
    study = load_study(os.environ.get("STUDY_CONFIG"))
    # The default preset: the calibrated relevance model on the hybrid retriever's scores, as deployed.
    params = study.memory.recall
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{Path(tmp) / 'bench.db'}"
        started = time.perf_counter()
        user_id, query_id, query, now = build_database(url, args.memories)
        print(f"built {args.memories} memories in {time.perf_counter() - started:.1f} s "
              f"(SQLite, migrated schema, preset {params.preset}, relevance {params.relevance.method}, "
              f"top_k {params.top_k}, retrieval {study.memory.retrieval.to_dict()})")
        db = Database(url)
        ForgettingCurveSearch.invalidate()
        timing = (db, study, params, user_id, query_id, query, now)
        load_before = os.getloadavg()
        cold = time_recall(*timing, use_cache=True, repeat=1)[0]
        warm, warm_cpu, recalled = time_recall(*timing, use_cache=True, repeat=args.repeat, warmup=10)
        uncached = time_recall(*timing, use_cache=False, repeat=max(5, args.repeat // 60))[0]
        index = next(iter(ForgettingCurveSearch._cache.values())).index
        core = time_core(index, query, params, args.repeat)
        load_after = os.getloadavg()
        db.dispose()
    rows = [
        ("(a) ForgettingCurveSearch.recall, index cached (warm)", warm),
        ("    the same, CPU time of the calling thread", warm_cpu),
        ("(a) ForgettingCurveSearch.recall, no cache (loads every call)", uncached),
        ("(b) ranking + scoring core (hybrid top-k, r, curve)", core),
    ]
    print(f"load average (1/5/15 min) before {' '.join(f'{v:.2f}' for v in load_before)}, "
          f"after {' '.join(f'{v:.2f}' for v in load_after)}")
    print(f"first recall (cold cache, loads and indexes): {cold['mean']:.2f} ms; recalled per query: {recalled}")
    print(f"{'':62s} {'p50 ms':>8s} {'p95 ms':>8s} {'p99 ms':>8s} {'mean ms':>8s} {'n':>5s}")
    for label, s in rows:
        print(f"{label:62s} {s['p50']:8.2f} {s['p95']:8.2f} {s['p99']:8.2f} {s['mean']:8.2f} {s['n']:5d}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
