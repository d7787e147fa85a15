"""MemoryEngine: what the assistant is allowed to remember, per memory condition.

The context is built only from the participant's *earlier, completed* tasks;
the task in progress reaches the model as ordinary chat history for every
condition (SPEC §2), so T1 is identical for all groups.

The result is a structured ``MemoryContext``: it is rendered into the system
prompt and stored, as a dict, with the reply it produced (the audit trail).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from config import SECONDS_PER_DAY
from database.models import Message, ProfileVersion, TaskSession
from services.clock import Clock
from services.profile import render_profile

SECTION_TITLES = {
    "profile": {"zh": "用户画像", "en": "User profile"},
    "recent_turns": {"zh": "以前的对话（最近几轮）", "en": "Earlier conversation (latest exchanges)"},
    "recalled": {"zh": "想起的往事", "en": "Recalled memories"},
    "summary": {"zh": "对话摘要", "en": "Conversation summary"},
    "fragments": {"zh": "相关的历史片段", "en": "Relevant earlier fragments"},
    "r1_memory": {"zh": "长期记忆", "en": "Long-term memory"},
    "none": {"zh": "（没有任何以前的记忆）", "en": "(no memory of earlier conversations)"},
}
ROLE_LABELS = {"user": {"zh": "用户", "en": "User"}, "assistant": {"zh": "助手", "en": "Assistant"}}


@dataclass
class MemoryContext:
    group: str
    language: str = "zh"
    profile: dict[str, Any] | None = None  # {"version", "text", "content"}
    recent_turns: list[dict[str, Any]] = field(default_factory=list)
    recalled: list[dict[str, Any]] = field(default_factory=list)
    summary: dict[str, Any] | None = None
    fragments: list[dict[str, Any]] = field(default_factory=list)
    r1_memory: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)
    # L4 audit: every top-k candidate considered (recalled or not) and the parameters used.
    recall_candidates: list[dict[str, Any]] = field(default_factory=list)
    recall_params: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def render(self) -> str:
        """The memory block placed in the system prompt."""
        lang = self.language if self.language in ("zh", "en") else "zh"
        blocks: list[str] = []
        if self.profile and self.profile.get("text"):
            blocks.append(f"[{SECTION_TITLES['profile'][lang]}]\n{self.profile['text']}")
        if self.summary and self.summary.get("text"):
            blocks.append(f"[{SECTION_TITLES['summary'][lang]}]\n{self.summary['text']}")
        if self.r1_memory and self.r1_memory.get("text"):
            blocks.append(f"[{SECTION_TITLES['r1_memory'][lang]}]\n{self.r1_memory['text']}")
        if self.recent_turns:
            lines = []
            for turn in self.recent_turns:
                lines.append(f"{ROLE_LABELS['user'][lang]}: {turn['user']}")
                if turn.get("assistant"):
                    lines.append(f"{ROLE_LABELS['assistant'][lang]}: {turn['assistant']}")
            blocks.append(f"[{SECTION_TITLES['recent_turns'][lang]}]\n" + "\n".join(lines))
        if self.recalled:
            # the memory is the exchange: the participant's words and what the assistant replied
            lines = [f"[{m['task_id']}] {ROLE_LABELS['user'][lang]}: {m['text']}"
                     + (f" / {ROLE_LABELS['assistant'][lang]}: {m['reply']}" if m.get("reply") else "")
                     for m in self.recalled]
            blocks.append(f"[{SECTION_TITLES['recalled'][lang]}]\n" + "\n".join(lines))
        if self.fragments:
            lines = [f"[{f['task_id']}] {f['text']}" for f in self.fragments]
            blocks.append(f"[{SECTION_TITLES['fragments'][lang]}]\n" + "\n".join(lines))
        return "\n\n".join(blocks) if blocks else SECTION_TITLES["none"][lang]


def earlier_turns(session: Session, user_id: int, before_session: TaskSession) -> list[dict[str, Any]]:
    """User/assistant turns from the participant's completed tasks before this one, oldest first.

    Only tasks that are done count (an abandoned or reset attempt is not memory)."""
    done_sessions = select(TaskSession.id).where(
        TaskSession.user_id == user_id,
        TaskSession.status == "done",
        TaskSession.id != before_session.id,
        TaskSession.started_at <= before_session.started_at,
    )
    rows = session.scalars(
        select(Message).where(Message.user_id == user_id, Message.task_session_id.in_(done_sessions))
        .order_by(Message.id)
    ).all()
    return pair_turns(rows)


def pair_turns(messages: list[Message]) -> list[dict[str, Any]]:
    """Group messages into turns (a user message and the reply to it)."""
    turns: list[dict[str, Any]] = []
    by_user_id: dict[int, dict[str, Any]] = {}
    for msg in messages:
        if msg.role == "user":
            turn = {"task_id": msg.task_id, "user": msg.content, "assistant": None,
                    "user_message_id": msg.id, "assistant_message_id": None}
            turns.append(turn)
            by_user_id[msg.id] = turn
        elif msg.role == "assistant" and msg.reply_to_id in by_user_id:
            turn = by_user_id[msg.reply_to_id]
            turn["assistant"] = msg.content
            turn["assistant_message_id"] = msg.id
    return turns


class MemoryEngine:
    """Routes to the builder of the participant's memory condition."""

    def __init__(self, session: Session, study: dict[str, Any], *, embedder=None, clock=None,
                 settings=None, defer_recall_writes: bool = False) -> None:
        # defer_recall_writes: L4 computes its recall without writing it; the caller applies
        # context.recall_candidates with VectorStore.apply when the reply is stored.
        self.session = session
        self.defer_recall_writes = defer_recall_writes
        self.study = study
        self.embedder = embedder
        self.clock = clock
        self.settings = settings

    def build_context(self, *, user_id: int, memory_group: str, task_session: TaskSession,
                      query: Message | None, language: str = "zh") -> MemoryContext:
        builders = {
            "L1": self._sensory,
            "L2": self._working,
            "L3": self._gist,
            "L4": self._hybrid,
            "S1": self._structured_summary,
            "R1": self._recursive_summary,
        }
        if memory_group not in builders:
            raise ValueError(f"unknown memory group {memory_group!r}")
        context = MemoryContext(group=memory_group, language=language)
        builders[memory_group](context, user_id=user_id, task_session=task_session, query=query)
        return context

    def _recent(self, user_id: int, task_session: TaskSession, n: int) -> list[dict[str, Any]]:
        if n <= 0:
            return []
        return earlier_turns(self.session, user_id, task_session)[-n:]

    def _sensory(self, context: MemoryContext, **_: Any) -> None:
        """L1: nothing from earlier tasks."""

    def _working(self, context: MemoryContext, *, user_id: int, task_session: TaskSession, **_: Any) -> None:
        """L2: the last N turns (default 7) before this task, verbatim."""
        n = self.study["memory"]["recent_turns_L2"]
        context.recent_turns = self._recent(user_id, task_session, n)

    def _gist(self, context: MemoryContext, *, user_id: int, task_session: TaskSession, **_: Any) -> None:
        """L3: the consolidated profile (gist) + the last N turns (default 3) before this task."""
        context.profile = self._profile(context, user_id)
        context.recent_turns = self._recent(user_id, task_session, self.study["memory"]["recent_turns_gist"])

    def _hybrid(self, context: MemoryContext, *, user_id: int, task_session: TaskSession, query: Message | None,
                **_: Any) -> None:
        """L4: L3's profile and turns + memories recalled by the forgetting curve (SPEC §2)."""
        self._gist(context, user_id=user_id, task_session=task_session)
        if query is None:
            context.notes.append("no query message: forgetting-curve recall skipped")
            return
        if self.embedder is None:
            context.notes.append("no embedder configured: forgetting-curve recall skipped")
            return
        from database.vector_store import VectorStore

        store = VectorStore(self.session, self.study, clock=self.clock or Clock(), day_seconds=self._day_seconds(),
                            embedder=self.embedder)
        candidates = store.recall(user_id=user_id, query_message=query, task_id=task_session.task_id,
                                  apply=not self.defer_recall_writes)
        context.recall_candidates = [c.to_dict() for c in candidates]
        context.recalled = [c.to_dict() for c in candidates if c.recalled]
        if store.last_query_content_free:
            context.notes.append("the message has no content words: it recalls nothing (recall candidate rule)")
        elif store.last_excluded:
            context.notes.append(f"{store.last_excluded} earlier message(s) without content are not recall "
                                 "candidates (recall candidate rule)")
        params = store.params
        context.recall_params = {"preset": params.preset, "top_k": params.top_k, "threshold": params.threshold,
                                 "time_unit": params.time_unit, "time_scale": params.time_scale,
                                 "relevance": params.relevance.to_dict(), "candidates": params.candidates.to_dict(),
                                 "retrieval": store.retrieval.to_dict()}

    def _profile(self, context: MemoryContext, user_id: int) -> dict[str, Any] | None:
        """The newest gist profile version, rendered in the participant's language and capped."""
        version = self.session.scalar(
            select(ProfileVersion).where(ProfileVersion.user_id == user_id, ProfileVersion.kind == "gist")
            .order_by(ProfileVersion.version.desc()).limit(1))
        if version is None:
            context.notes.append("no consolidated profile yet")
            return None
        text = render_profile(version.content, language=context.language,
                              max_chars=int(self.study["memory"]["gist_max_chars"]))
        return {"version": version.version, "text": text, "content": version.content, "task_id": version.task_id,
                "source": version.source, "profile_version_id": version.id}

    def _day_seconds(self) -> float:
        return float(self.settings.day_seconds) if self.settings is not None else float(SECONDS_PER_DAY)

    def _structured_summary(self, context: MemoryContext, *, user_id: int, task_session: TaskSession,
                            query: Message | None, **_: Any) -> None:
        """S1: the structured summary of earlier tasks + fuzzy recall of history fragments."""
        from config import SECONDS_PER_DAY
        from services import structured_summary  # imported here: it imports this module
        from services.clock import Clock

        day_seconds = self.settings.day_seconds if self.settings is not None else SECONDS_PER_DAY
        structured_summary.build_context(
            self.session, context=context, user_id=user_id, task_session=task_session, query=query,
            embedder=self.embedder, clock=self.clock or Clock(), study=self.study, day_seconds=day_seconds)

    def _recursive_summary(self, context: MemoryContext, *, user_id: int, task_session: TaskSession,
                           query: Message | None, **_: Any) -> None:
        """R1: the latest recursively updated memory (summary items + verbatim entries)."""
        from services import recursive_memory  # imported here: it imports this module

        recursive_memory.build_context(self.session, context=context, user_id=user_id, task_session=task_session,
                                       query=query, study=self.study)
