"""What each memory condition actually hands the model, measured through the deployed code.

The ranking benchmark (``services.research.memory_bench``) asks how well a ranker orders the turns. This
module asks what the study's conditions put into the prompt, with their real gates and cut-offs:
a benchmark history (a LoCoMo conversation, a MemoryBank user) is written into a throwaway SQLite
database with the real migrated schema, once per condition of the study, as a participant of that
condition whose finished tasks are the history's sessions. The chat path's own hooks then do
what they do after a live chat: ``chat_service.after_reply`` after every stored reply (S1 rewrites
its summary) and ``chat_service.on_chat_ended`` at the end of every session (the real
consolidation, with the offline chain and the study's embedder). For every probe question a user
message is put into a new task and ``MemoryEngine.build_context`` builds the condition's context
exactly as the chat does before a reply (L4's recall writes deferred, so the questions do not
change each other's state).

A probe's evidence counts as handed over when a section the model reads references the evidence
message (its id in any ``*message_id`` field: recent turns, recalled memories, fragments; not the
audit of L4's candidates) or the rendered
memory block contains the message's text verbatim (its first 60 characters, for texts of at
least 20). Paraphrases inside a profile or summary are not credited: the measure is the share
of the evidence the model can read as it was said. Tokens are counted on the rendered memory
block, one per CJK character, word, number or other non-space symbol (no model tokenizer is
bundled offline; it is an estimate of the right order, the same for every condition).
"""
from __future__ import annotations

import re
import tempfile
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from database.db_manager import Database
from database.models import Assignment, Message, TaskSession, User
from services.text.tokens import count_tokens

EVIDENCE_PREFIX_CHARS = 60
EVIDENCE_MIN_CHARS = 20
SECONDS_BETWEEN_MESSAGES = 30.0
PROBE_TASK = "TQ"  # the task in progress when the probe questions are asked
_SPACE = re.compile(r"\s+")


@dataclass(frozen=True)
class HistoryTurn:
    """One stored message: ``key`` names it in the evidence (LoCoMo 'D3:7', MemoryBank 'date#j')."""

    key: str
    role: str  # "user" (the participant) or "assistant" (the reply)
    text: str
    session: str  # the history's session/day; each becomes one finished task
    when: datetime  # when the session took place


@dataclass(frozen=True)
class Probe:
    qid: str
    question: str
    evidence: tuple[str, ...]  # keys of HistoryTurn
    category: str | None = None


@dataclass
class BenchHistory:
    name: str
    language: str
    turns: list[HistoryTurn]
    probes: list[Probe]
    asked_at: datetime  # when the probe questions are put (after the last session)


@dataclass
class ConditionOutcome:
    """Per condition: sums over probes of the evidence share, the items and the tokens handed over."""

    condition: str
    probes: int = 0
    evidence_share: float = 0.0
    items: int = 0
    tokens: int = 0
    candidate_share: float = 0.0  # L4-style audit: evidence among the candidates considered, before the gate
    candidates: int = 0
    per_probe: list[dict[str, Any]] = field(default_factory=list)

    def add(self, qid: str, share: float, items: int, tokens: int,
            candidates: tuple[float, int] | None = None) -> None:
        self.probes += 1
        self.evidence_share += share
        self.items += items
        self.tokens += tokens
        row = {"qid": qid, "evidence_share": share, "items": items, "tokens": tokens}
        if candidates is not None:
            self.candidate_share += candidates[0]
            self.candidates += candidates[1]
            row.update(candidate_share=candidates[0], candidates=candidates[1])
        self.per_probe.append(row)

    def to_dict(self) -> dict[str, Any]:
        n = max(self.probes, 1)
        out = {"probes": self.probes, "evidence_share": self.evidence_share / n,
               "items_per_question": self.items / n, "tokens_per_question": self.tokens / n}
        if self.candidates:
            out.update(candidate_evidence_share=self.candidate_share / n, candidates_per_question=self.candidates / n)
        return out


def _normalised(text: str) -> str:
    return _SPACE.sub(" ", text or "").strip()


def referenced_message_ids(value: Any) -> set[int]:
    """Every integer under a key ending in ``message_id`` anywhere in a context dict."""
    found: set[int] = set()
    if isinstance(value, Mapping):
        for key, item in value.items():
            if str(key).endswith("message_id") and isinstance(item, int) and not isinstance(item, bool):
                found.add(item)
            else:
                found |= referenced_message_ids(item)
    elif isinstance(value, list | tuple):
        for item in value:
            found |= referenced_message_ids(item)
    return found


def context_items(context: Mapping[str, Any]) -> int:
    """Items in a context: each recent turn, recalled memory and fragment, plus one for each
    profile, summary or long-term memory that has text."""
    lists = sum(len(context.get(name) or []) for name in ("recent_turns", "recalled", "fragments"))
    blocks = sum(1 for name in ("profile", "summary", "r1_memory") if (context.get(name) or {}).get("text"))
    return lists + blocks


# The parts of a stored context that go into the prompt. Everything else (L4's recall_candidates,
# recall_params, notes) is audit data the model never sees, so ids found there earn no credit.
HANDED_OVER_SECTIONS = ("profile", "recent_turns", "recalled", "summary", "fragments", "r1_memory")


def handed_over(evidence_ids: Iterable[int], texts: Mapping[int, str], context: Mapping[str, Any],
                rendered: str) -> set[int]:
    """The evidence messages the model can read: referenced by id in a handed-over section, or
    quoted verbatim in the rendered memory block."""
    ids = referenced_message_ids({key: context.get(key) for key in HANDED_OVER_SECTIONS})
    flat = _normalised(rendered)
    out: set[int] = set()
    for message_id in evidence_ids:
        text = _normalised(texts[message_id])
        if message_id in ids or (len(text) >= EVIDENCE_MIN_CHARS and text[:EVIDENCE_PREFIX_CHARS] in flat):
            out.add(message_id)
    return out


def candidate_share(evidence_ids: Sequence[int], context: Mapping[str, Any]) -> tuple[float, int] | None:
    """For a context that audits the candidates it considered (L4's ``recall_candidates``): the share
    of the evidence among them, and how many there were; None for a context without that audit."""
    candidates = context.get("recall_candidates")
    if not candidates:
        return None
    ids = referenced_message_ids(candidates)
    found = sum(1 for e in evidence_ids if e in ids)
    return (found / len(evidence_ids) if evidence_ids else 0.0), len(candidates)


class CachedEmbedder:
    """The study's embedder behind the benchmark's on-disk cache (same model name, same vectors)."""

    def __init__(self, cache: Any) -> None:
        self.cache = cache
        self.name = getattr(cache.embedder, "name", "offline")
        self.model = cache.embedder.model
        self.dim = cache.embedder.dim

    def embed_queries(self, texts: list[str]) -> Any:
        return self.cache.embed(list(texts), "query")

    def embed_passages(self, texts: list[str]) -> Any:
        return self.cache.embed(list(texts), "passage")


@contextmanager
def deployed_runtime(embedder: Any) -> Iterator[Any]:
    """A Runtime on a throwaway migrated SQLite database: offline chains, consolidation and
    per-turn upkeep run inline, a manual clock, the given embedder."""
    from config import Settings
    from services.hosting.runtime import build_runtime
    from services.platform.clock import ManualClock

    with tempfile.TemporaryDirectory(prefix="memory-bench-") as tmp:
        url = f"sqlite:///{Path(tmp) / 'bench.db'}"
        database = Database(url)
        database.upgrade()
        settings = Settings(database_url=url, secret_key="memory-bench", testing=True, llm_providers=["offline"],
                            consolidate_inline=True, scheduler_enabled=False, rate_limits_enabled=False,
                            run_migrations_on_start=False)
        runtime = build_runtime(settings, clock=ManualClock(datetime(2000, 1, 1)), db=database)
        runtime.embedder = embedder
        try:
            yield runtime
        finally:
            runtime.background.shutdown(wait=True)
            database.dispose()


class DeployedBench:
    """Writes histories as participants of each condition and measures the contexts built."""

    def __init__(self, runtime: Any, conditions: Sequence[str] | None = None) -> None:
        self.runtime = runtime
        self.conditions = list(conditions or runtime.study.conditions)
        self.outcomes = {c: ConditionOutcome(c) for c in self.conditions}
        self._users = 0

    def run(self, history: BenchHistory) -> None:
        for condition in self.conditions:
            user_id, keys = self._store(history, condition)
            self._probe(history, condition, user_id, keys)

    # -- writing the history the way the chat would leave it ------------------

    def _store(self, history: BenchHistory, condition: str) -> tuple[int, dict[str, int]]:
        from services.chat import chat_service

        clock = self.runtime.clock
        keys: dict[str, int] = {}
        sessions: list[tuple[str, list[HistoryTurn]]] = []
        for turn in history.turns:
            if not sessions or sessions[-1][0] != turn.session:
                sessions.append((turn.session, []))
            sessions[-1][1].append(turn)
        user_id = self._participant(history, condition)
        for number, (_, turns) in enumerate(sessions, start=1):
            clock.set(turns[0].when)
            # Task tags in profiles must look like the study's ("T<id>"), so session n is task "T<n>".
            ts_id, replies = self._write_session(user_id, condition, f"T{number}", turns, keys)
            for reply_id in replies:
                chat_service.after_reply(self.runtime, reply_id)
            chat_service.on_chat_ended(self.runtime, ts_id)
        return user_id, keys

    def _participant(self, history: BenchHistory, condition: str) -> int:
        self._users += 1
        now = self.runtime.clock.now()
        with self.runtime.db.session() as session:
            user = User(username=f"bench{self._users}", password_hash="-", role="participant",
                        participant_code=f"B{self._users:05d}", language=history.language, created_at=now)
            session.add(user)
            session.flush()
            session.add(Assignment(user_id=user.id, memory_group=condition, block_index=user.id, slot_index=0,
                                   block_sequence=[condition], created_at=now))
            return user.id

    def _write_session(self, user_id: int, condition: str, task_id: str, turns: Sequence[HistoryTurn],
                       keys: dict[str, int]) -> tuple[int, list[int]]:
        clock = self.runtime.clock
        replies: list[int] = []
        with self.runtime.db.session() as session:
            ts = TaskSession(user_id=user_id, task_id=task_id, attempt=1, status="done", phase="closed",
                             started_at=clock.now(), last_activity_at=clock.now(), consolidation_status="pending")
            session.add(ts)
            session.flush()
            last_user: Message | None = None
            for turn in turns:
                clock.advance(SECONDS_BETWEEN_MESSAGES)
                is_reply = turn.role == "assistant"
                message = Message(user_id=user_id, task_session_id=ts.id, task_id=task_id, role=turn.role,
                                  content=turn.text, created_at=clock.now(),
                                  reply_to_id=last_user.id if is_reply and last_user else None,
                                  memory_group=condition if is_reply else None)
                session.add(message)
                session.flush()
                keys[turn.key] = message.id
                if is_reply and message.reply_to_id is not None:
                    # A reply that answers no message (a LoCoMo session opened by the other speaker)
                    # has no per-turn upkeep: the chat never produces one.
                    replies.append(message.id)
                else:
                    last_user = message
            ts.chat_ended_at = ts.last_activity_at = clock.now()
            return ts.id, replies

    # -- asking the probes ----------------------------------------------------

    def _probe(self, history: BenchHistory, condition: str, user_id: int, keys: Mapping[str, int]) -> None:
        from services.memory.engine import MemoryEngine

        runtime = self.runtime
        runtime.clock.set(history.asked_at)
        texts = {message_id: turn.text for turn in history.turns if (message_id := keys.get(turn.key))}
        outcome = self.outcomes[condition]
        with runtime.db.session() as session:
            ts = TaskSession(user_id=user_id, task_id=PROBE_TASK, attempt=1, status="in_progress", phase="chat",
                             started_at=runtime.clock.now(), last_activity_at=runtime.clock.now(),
                             consolidation_status="pending")
            session.add(ts)
            session.flush()
            for probe in history.probes:
                query = Message(user_id=user_id, task_session_id=ts.id, task_id=PROBE_TASK, role="user",
                                content=probe.question, created_at=runtime.clock.now())
                session.add(query)
                session.flush()
                engine = MemoryEngine(session, runtime.study, embedder=runtime.embedder, clock=runtime.clock,
                                      day_seconds=runtime.settings.day_seconds, defer_writes=True)
                context = engine.build_context(user_id=user_id, memory_group=condition, task_session=ts,
                                               query=query, language=history.language)
                as_dict, rendered = context.to_dict(), context.render()
                evidence = [keys[k] for k in probe.evidence if k in keys]
                got = handed_over(evidence, texts, as_dict, rendered)
                share = len(got) / len(evidence) if evidence else 0.0
                outcome.add(probe.qid, share, context_items(as_dict), count_tokens(rendered),
                            candidate_share(evidence, as_dict))
                session.delete(query)
                session.flush()


def day_after(moments: Iterable[datetime]) -> datetime:
    """Noon of the day after the latest moment: when probe questions are put."""
    last = max(moments)
    return datetime(last.year, last.month, last.day, 12) + timedelta(days=1)


# ---------------------------------------------------------------------------
# Benchmark data as histories
# ---------------------------------------------------------------------------


def locomo_history(conv: Any, language: str = "en") -> BenchHistory:
    """A LoCoMo conversation (``memory_bench.Conversation``): the first speaker is the participant,
    the other one writes the replies; each session is one finished task; a turn is stored as the
    ranking benchmark indexes it (``speaker: text [shares caption]``). Questions are put at noon
    of the day after the last session."""
    participant = conv.turns[0].speaker if conv.turns else ""
    turns = [HistoryTurn(key=t.dia_id, role="user" if t.speaker == participant else "assistant", text=t.passage(),
                         session=str(t.session), when=t.when) for t in conv.turns]
    probes = [Probe(qid=f"{conv.index}#{q.index}", question=q.question, evidence=q.evidence,
                    category=str(q.category)) for q in conv.questions]
    return BenchHistory(name=conv.sample_id, language=language, turns=turns, probes=probes,
                        asked_at=day_after(t.when for t in conv.turns))


def reply_key(key: str) -> str:
    return f"{key}/reply"


def memorybank_history(user: Any, probes: Sequence[Probe], language: str) -> BenchHistory:
    """A MemoryBank user (``memory_bench.MemoryBankUser``): each day is one finished task, each
    exchange the user's message and the AI's reply. A probe's evidence names exchanges
    ('date#j'); both messages of an evidence exchange are evidence here, so a condition that shows
    only the participant's half gets half the credit."""
    turns: list[HistoryTurn] = []
    for memory in user.exchanges:
        day = memory.key.split("#")[0]
        turns.append(HistoryTurn(memory.key, "user", memory.query, day, memory.when))
        if memory.response:
            turns.append(HistoryTurn(reply_key(memory.key), "assistant", memory.response, day, memory.when))
    stored = {t.key for t in turns}
    expanded = [Probe(p.qid, p.question, tuple(k for e in p.evidence for k in (e, reply_key(e)) if k in stored),
                      p.category) for p in probes]
    return BenchHistory(name=user.name, language=language, turns=turns, probes=expanded, asked_at=user.question_time)
