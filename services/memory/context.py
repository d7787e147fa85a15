"""The memory context of one reply, and what counts as memory: turns of earlier, completed tasks.

The context is built only from the participant's *earlier, completed* tasks;
the task in progress reaches the model as ordinary chat history for every
condition (SPEC §2), so T1 is identical for all groups.

A ``MemoryContext`` knows nothing of conditions: each condition adds the
sections it contributes (``add_section``: stored data + the block rendered into
the system prompt), notes, and writes to run with the reply (``defer``). It is
stored, as a dict, with the reply it produced (the audit trail).

A note is a code with parameters (``note("excluded", n=3)``), shown to the admin in their language from the
catalogs' ``admin.note.<code>``; notes stored before were English sentences, read back as codes by
``coded_notes``.
"""
from __future__ import annotations

import copy
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from sqlalchemy import Select, bindparam, select, union_all
from sqlalchemy.orm import Session

from database.models import Message, ProfileVersion, TaskSession
from services.text.languages import prompt_language
from services.text.tokens import count_tokens

SECTION_TITLES = {
    "profile": {"zh": "用户画像", "en": "User profile"},
    "recent_turns": {"zh": "以前的对话（最近几轮）", "en": "Earlier conversation (latest exchanges)"},
    "recalled": {"zh": "想起的往事", "en": "Recalled memories"},
    "summary": {"zh": "对话摘要", "en": "Conversation summary"},
    "fragments": {"zh": "相关的历史片段", "en": "Relevant earlier fragments"},
    "r1_memory": {"zh": "长期记忆", "en": "Long-term memory"},
    "none": {"zh": "（没有任何以前的记忆）", "en": "(no memory of earlier conversations)"},
}
# Every stored context carries these sections (empty when the condition contributes none), so an
# analysis reads one shape whatever the condition; a new condition's own sections are added after them.
STORED_SECTIONS: dict[str, Any] = {
    "profile": None, "recent_turns": [], "recalled": [], "summary": None, "fragments": [], "r1_memory": None,
}
STORED_AUDIT: dict[str, Any] = {"recall_candidates": [], "recall_params": None}
ROLE_LABELS = {"user": {"zh": "用户", "en": "User"}, "assistant": {"zh": "助手", "en": "Assistant"}}
# The English sentences notes were stored as before they were codes, and the code each is now: a context stored
# then is read back in the same shape as a new one (coded_notes). Frozen: new notes are written as codes.
LEGACY_NOTES: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"no consolidated profile yet"), "no_profile"),
    (re.compile(r"R1: no memory from earlier tasks yet"), "r1_empty"),
    (re.compile(r"S1: no structured summary from earlier tasks yet"), "s1_empty"),
    (re.compile(r"no query message: forgetting-curve recall skipped"), "no_query"),
    (re.compile(r"no embedder configured: forgetting-curve recall skipped"), "no_embedder"),
    (re.compile(r"the message has no content words: it recalls nothing \(recall candidate rule\)"), "no_content_words"),
    (re.compile(r"(?P<n>\d+) earlier message\(s\) without content are not recall candidates \(recall candidate rule\)"),
     "excluded"),
    (re.compile(r"S1 recall without an embedder: semantic similarity counted as 0, every message scored"),
     "s1_no_embedder"),
    (re.compile(r"S1 recall: embedding failed \((?P<error>.*)\); semantic similarity counted as 0", re.S),
     "s1_embedding_failed"),
    (re.compile(r"S1 fuzzy recall: (?P<scored>\d+) candidates of (?P<total>\d+) earlier messages, (?P<chosen>\d+) at "
                r"or above (?P<threshold>[\d.]+)"), "s1_fuzzy"),
]


def note(code: str, **params: Any) -> dict[str, Any]:
    """A note for the admin: its code (catalog key ``admin.note.<code>``) and the parameters its text names."""
    return {"code": code, "params": params}


def coded_notes(notes: Sequence[Any] | None) -> list[dict[str, Any]]:
    """Stored notes as codes: a coded note as it is, an English one from before as its code (``text`` with the
    sentence itself when it is none of them)."""
    coded = []
    for stored in notes or []:
        if isinstance(stored, dict):
            coded.append(stored)
            continue
        for pattern, code in LEGACY_NOTES:
            match = pattern.fullmatch(str(stored))
            if match:
                coded.append(note(code, **{k: _number(v) for k, v in match.groupdict().items()}))
                break
        else:
            coded.append(note("text", text=str(stored)))
    return coded


def with_coded_notes(stored_context: dict[str, Any] | None) -> dict[str, Any] | None:
    """A stored memory context with its notes as codes (what the admin console reads)."""
    if not stored_context or "notes" not in stored_context:
        return stored_context
    return {**stored_context, "notes": coded_notes(stored_context["notes"])}


def _number(text: str) -> int | float | str:
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            continue
    return text


class DeferredWrite(Protocol):
    """A write a context build computed but left to the caller (done with the reply, in its transaction)."""

    def write(self, session: Session) -> None: ...


@dataclass
class Section:
    key: str
    data: Any  # stored with the reply under ``key``
    block: str | None  # the text placed in the system prompt; None: audit data only
    title: dict[str, str] | None = None


@dataclass
class MemoryContext:
    group: str
    language: str = "zh"
    sections: dict[str, Section] = field(default_factory=dict)
    notes: list[dict[str, Any]] = field(default_factory=list)  # note(...)
    deferred: list[DeferredWrite] = field(default_factory=list)

    def add_section(self, key: str, data: Any, block: str | None = None,
                    title: dict[str, str] | None = None) -> None:
        """Contribute a section; sections render in the order they are added."""
        self.sections[key] = Section(key, data, block, title or SECTION_TITLES.get(key))

    def get(self, key: str, default: Any = None) -> Any:
        """The stored data of a section, or ``default`` when the condition did not contribute it."""
        section = self.sections.get(key)
        if section is not None:
            return section.data
        return copy.deepcopy({**STORED_SECTIONS, **STORED_AUDIT}.get(key, default))

    def defer(self, write: DeferredWrite) -> None:
        self.deferred.append(write)

    def to_dict(self) -> dict[str, Any]:
        data = {"group": self.group, "language": self.language, **copy.deepcopy(STORED_SECTIONS),
                "notes": list(self.notes), **copy.deepcopy(STORED_AUDIT)}
        data.update({key: section.data for key, section in self.sections.items()})
        return data

    def render(self) -> str:
        """The memory block placed in the system prompt."""
        lang = prompt_language(self.language)
        blocks = [f"[{section.title[lang]}]\n{section.block}" for section in self.sections.values()
                  if section.block and section.title]
        return "\n\n".join(blocks) if blocks else SECTION_TITLES["none"][lang]


def render_turns(turns: Sequence[dict[str, Any]], language: str, *, tagged: bool = False) -> str:
    """Turns as ``User: ...`` / ``Assistant: ...`` lines (``tagged``: each prefixed with its ``[task]``)."""
    lang = prompt_language(language)
    lines = []
    for turn in turns:
        tag = f"[{turn['task_id']}] " if tagged else ""
        lines.append(f"{tag}{ROLE_LABELS['user'][lang]}: {turn['user']}")
        if turn.get("assistant"):
            lines.append(f"{tag}{ROLE_LABELS['assistant'][lang]}: {turn['assistant']}")
    return "\n".join(lines)


def render_tagged(items: Sequence[dict[str, Any]]) -> str:
    """Memories as ``[task] text`` lines."""
    return "\n".join(f"[{item['task_id']}] {item['text']}" for item in items)


# The participant's completed task sessions before a given one: the rule of what is memory, once. Only tasks that
# are done count (an abandoned or reset attempt is not memory). Built once with bind parameters: the hot read
# below embeds it as is, and ``earlier_done_sessions`` fills it in for the other readers.
_EARLIER_DONE = select(TaskSession.id).where(
    TaskSession.user_id == bindparam("user_id"),
    TaskSession.status == "done",
    TaskSession.id != bindparam("task_session_id"),
    TaskSession.started_at <= bindparam("started_at"),
)


def earlier_done_sessions(user_id: int, task_session: TaskSession) -> Select:
    """SELECT of the participant's completed task sessions before ``task_session`` (the memory)."""
    return _EARLIER_DONE.params(_earlier_done_values(user_id, task_session))


def _earlier_done_values(user_id: int, task_session: TaskSession) -> dict[str, Any]:
    return {"user_id": user_id, "task_session_id": task_session.id, "started_at": task_session.started_at}


# The messages of those sessions, with the columns a turn is made of: whole rows would decode every reply's
# stored prompt and context (JSON that grows with the conversation). Built once, as it runs for every reply of
# L2-L4: a statement built per call is coerced and given its cache key anew every time (docs/benchmarks.md,
# "CPU per reply, session 12").
_EARLIER_MESSAGES = (
    select(Message.id, Message.role, Message.content, Message.task_id, Message.reply_to_id)
    .where(Message.user_id == bindparam("user_id"), Message.task_session_id.in_(_EARLIER_DONE))
    .order_by(Message.id))


# The task so far and the earlier turns in one statement, for a message whose condition keeps earlier turns: the
# reply's context then needs no read of its own for them (``read_task_and_earlier_turns``).
_TASK_COLUMNS = (Message.id, Message.role, Message.content, Message.task_id, Message.reply_to_id,
                 Message.task_session_id)
_TASK_AND_EARLIER = union_all(
    select(*_TASK_COLUMNS).where(Message.task_session_id == bindparam("task_session_id")),
    select(*_TASK_COLUMNS).where(Message.user_id == bindparam("user_id"), Message.task_session_id.in_(_EARLIER_DONE)),
).order_by("id")
_PRELOADED = "memory.context.earlier_turns"  # Session.info: (user id, task session id, turns), used once


def read_task_and_earlier_turns(session: Session, user_id: int, task_session: TaskSession) -> list[tuple[str, str]]:
    """The (role, content) of ``task_session``'s messages so far, oldest first, read with the participant's earlier
    turns (``earlier_turns``) in one statement; the turns are kept in the session for the next ``earlier_turns`` of
    this participant and task in it (the reply's context, in the same request)."""
    rows = session.execute(_TASK_AND_EARLIER, _earlier_done_values(user_id, task_session)).all()
    task = [(row.role, row.content) for row in rows if row.task_session_id == task_session.id]
    earlier = [row for row in rows if row.task_session_id != task_session.id]
    session.info[_PRELOADED] = (user_id, task_session.id, pair_turns(earlier))
    return task


def earlier_turns(session: Session, user_id: int, before_session: TaskSession) -> list[dict[str, Any]]:
    """User/assistant turns from the participant's completed tasks before this one, oldest first: as
    ``read_task_and_earlier_turns`` left them in ``session`` for this participant and task (once), or read now."""
    preloaded = session.info.pop(_PRELOADED, None)
    if preloaded is not None and preloaded[:2] == (user_id, before_session.id):
        return preloaded[2]
    rows = session.execute(_EARLIER_MESSAGES, _earlier_done_values(user_id, before_session)).all()
    return pair_turns(rows)


def recent_turns(session: Session, user_id: int, task_session: TaskSession, n: int) -> list[dict[str, Any]]:
    """The last ``n`` turns before this task, verbatim."""
    if n <= 0:
        return []
    return earlier_turns(session, user_id, task_session)[-n:]


def pair_turns(messages: Sequence[Any]) -> list[dict[str, Any]]:
    """Group messages (``Message`` rows, or rows of their ``id``, ``role``, ``content``, ``task_id`` and
    ``reply_to_id``) into turns (a user message and the reply to it)."""
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


def latest_version_within(session: Session, user_id: int, kind: str,
                          session_ids: set[int]) -> ProfileVersion | None:
    """The newest version of ``kind`` whose basis is one of ``session_ids``.

    Versions written during an attempt that was later reset or abandoned are skipped:
    what was said there is not memory."""
    if not session_ids:
        return None
    rows = session.scalars(
        select(ProfileVersion).where(ProfileVersion.user_id == user_id, ProfileVersion.kind == kind)
        .order_by(ProfileVersion.version.desc()).execution_options(yield_per=20)
    )
    try:
        for row in rows:  # newest first; the match is normally among the first few rows
            basis = (row.content or {}).get("basis") or {}
            if basis.get("task_session_id") in session_ids:
                return row
        return None
    finally:
        rows.close()


def memory_exposure(context: dict[str, Any], task_id: str) -> dict[str, Any]:
    """How much of the earlier tasks a stored context (``MemoryContext.to_dict()``) carried into a reply of
    ``task_id``: the earlier-task messages it quotes by id (recent turns, recalled memories, fragments), whether
    a profile or a summary (S1's summary, R1's memory) was in it, and the tokens of that earlier-task content
    (``services.text.tokens.count_tokens``). A recalled memory is the participant's message (its id) with the
    reply to it (its text counted). Nothing from the task in progress counts."""
    ids: set[int] = set()
    texts: list[str] = []
    for turn in context.get("recent_turns") or []:
        if turn.get("task_id") != task_id:
            ids.update(i for i in (turn.get("user_message_id"), turn.get("assistant_message_id")) if i is not None)
            texts += [turn.get("user") or "", turn.get("assistant") or ""]
    for memory in context.get("recalled") or []:
        if memory.get("task_id") != task_id:
            ids.add(memory["message_id"])
            texts += [memory.get("text") or "", memory.get("reply") or ""]
    for fragment in context.get("fragments") or []:
        if fragment.get("task_id") != task_id:
            ids.add(fragment["message_id"])
            texts.append(fragment.get("text") or "")
    profile = context.get("profile")
    summaries = [s for s in (context.get("summary"), context.get("r1_memory")) if s]
    texts += [block.get("text") or "" for block in [profile, *summaries] if block]
    return {"earlier_message_ids": sorted(int(i) for i in ids), "profile_present": bool(profile),
            "summary_present": bool(summaries), "tokens": sum(count_tokens(t) for t in texts)}
