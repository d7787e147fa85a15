"""Storage queries behind forgetting-curve recall: the participant's consolidated message vectors,
the index-backed checks that tell whether a cached copy of them is still current (read with the
candidate rows, in one round trip), and the write of a recall.

The recall algorithm itself (top-k, forgetting curve, the matrix cache) lives in
``services.memory.hybrid``; this module stores and queries only.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Row, and_, bindparam, func, insert, select, update
from sqlalchemy.orm import Session

from database.models import ConsolidationRun, Message, RecallEvent
from database.participant_lock import hold_participant

# What recall reads of a candidate memory: the checks against the cached index (owner, role, consolidated,
# embedding bytes and model) and the inputs of the forgetting curve.
RECALL_COLUMNS = (Message.id, Message.user_id, Message.role, Message.task_id, Message.content, Message.created_at,
                  Message.embedding, Message.embedding_model, Message.consolidated_at, Message.consolidation_g,
                  Message.last_recall_at, Message.emotional_salience, Message.emotional_intensity,
                  Message.self_disclosure, Message.value_relevance)


def _consolidated(user_id: Any) -> tuple[Any, ...]:
    """A participant's consolidated user messages that carry an embedding: the memories."""
    return (Message.user_id == user_id, Message.role == "user", Message.embedding.is_not(None),
            Message.consolidated_at.is_not(None))


# The statements of a warm recall are built once, with bound parameters: building a statement and its cache
# key for every recall cost more than running it (docs/benchmarks.md, "Recall").
_user = bindparam("user_id")
# Changes whenever a consolidation run of the participant starts, finishes or fails.
_RUNS_STATE = (select(func.count(ConsolidationRun.id), func.max(ConsolidationRun.id),
                      func.max(func.coalesce(ConsolidationRun.finished_at, ConsolidationRun.started_at)))
               .where(ConsolidationRun.user_id == _user))
# _RUNS_STATE plus whether a consolidated memory newer than :max_id exists (a range scan over the (user_id, id)
# index that only reaches messages written since), as one row left-joined by primary key to the candidate
# messages :ids, so the state comes back even when no candidate does.
_newer = (select(Message.id).where(*_consolidated(_user), Message.id > bindparam("max_id"))
          .limit(1).correlate(None).scalar_subquery())
_state = _RUNS_STATE.add_columns(_newer).subquery("state")
_RECALL_ROWS = (select(_state, *RECALL_COLUMNS)
                .select_from(_state.outerjoin(Message, Message.id.in_(bindparam("ids", expanding=True)))))
_messages = Message.__table__
# A recalled memory: the new g, one more recall, and when (Core, executemany; bind names differ from columns).
_RECALL_UPDATE = (update(_messages).where(_messages.c.id == bindparam("memory_id"))
                  .values(consolidation_g=bindparam("g_after"), last_recall_at=bindparam("at"),
                          recall_count=func.coalesce(_messages.c.recall_count, 0) + 1))
_RECALL_EVENTS = insert(RecallEvent.__table__)


@dataclass(frozen=True)
class RecallRows:
    """Candidate rows of one recall (by id, rows that exist) and the participant's state when read."""

    runs_state: tuple[str, ...]  # VectorStore.runs_state
    newer: bool  # a consolidated memory newer than the cached ones exists
    rows: dict[int, Row]


class VectorStore:
    """Queries and recall writes over one database session; commits nothing (``write_recall`` flushes)."""

    def __init__(self, session: Session) -> None:
        self.session = session

    def database_key(self) -> str:
        """Names the database, so caches of two databases in one process never mix."""
        return str(self.session.get_bind().url)

    def _core(self, statement: Any, parameters: Any) -> Any:
        """Run a statement on the session's connection as plain Core: the ORM's per-execution set-up
        cost more than the statements of a warm recall themselves. Flushes first, as the session's own
        autoflush would."""
        if self.session.autoflush:
            self.session.flush()
        return self.session.connection().execute(statement, parameters)

    def runs_state(self, user_id: int) -> tuple[str, ...]:
        """The participant's consolidation runs (count, newest, last start/finish), as strings."""
        return tuple(str(v) for v in self.session.execute(_RUNS_STATE, {"user_id": user_id}).one())

    def recall_rows(self, user_id: int, ids: Sequence[int], max_id: int) -> RecallRows:
        """The recall columns of the messages ``ids``, with ``runs_state`` and whether a memory newer than
        ``max_id`` exists, in one round trip: a warm recall checks its cached index with the rows it
        reads anyway (``_RECALL_ROWS``)."""
        result = self._core(_RECALL_ROWS, {"user_id": user_id, "max_id": max_id, "ids": list(ids)}).all()
        first = result[0]
        return RecallRows(runs_state=tuple(str(v) for v in first[:3]), newer=first[3] is not None,
                          rows={row.id: row for row in result if row.id is not None})

    def consolidated_vectors(self, user_id: int, *, with_links: bool = False) -> Sequence[Row]:
        """Every consolidated user message of the participant with its embedding, oldest first.

        ``with_links``: in the same statement, each row also names (``recalled_memory``) a memory that message
        recalled (RecallEvent.recalled), one row per such memory and one with ``recalled_memory`` None for a
        message that recalled nothing: L4's rehearsal route (services.recall.rehearsal) comes with the index load."""
        columns = (Message.id, Message.task_session_id, Message.task_id, Message.embedding_model, Message.embedding,
                   Message.content, Message.emotional_salience, Message.emotional_intensity, Message.self_disclosure,
                   Message.value_relevance)
        if not with_links:
            return self.session.execute(select(*columns).where(*_consolidated(user_id)).order_by(Message.id)).all()
        recalled = and_(RecallEvent.query_message_id == Message.id, RecallEvent.recalled.is_(True))
        return self.session.execute(
            select(*columns, RecallEvent.memory_message_id.label("recalled_memory"))
            .outerjoin(RecallEvent, recalled).where(*_consolidated(user_id))
            .order_by(Message.id, RecallEvent.id)
        ).all()

    def replies(self, user_id: int) -> dict[int, str]:
        """The assistant's reply to each of the participant's messages (the latest, if it was regenerated)."""
        rows = self.session.execute(
            select(Message.reply_to_id, Message.content).where(
                Message.user_id == user_id, Message.role == "assistant", Message.reply_to_id.is_not(None))
            .order_by(Message.id)
        ).all()
        return {r.reply_to_id: r.content for r in rows}

    def write_recall(self, recalled: Sequence[Mapping[str, Any]], events: Sequence[Mapping[str, Any]]) -> None:
        """Write one recall: for each of ``recalled`` (``memory_id``, ``g_after``, ``at``) set the memory's
        g and ``last_recall_at`` and count the recall; insert ``events`` as RecallEvent rows.

        Pending ORM changes are flushed first (the events' query message must exist). Then one Core
        executemany per table, without the unit of work's per-object bookkeeping: the count is
        incremented in SQL, and loaded objects of the updated messages are expired so they read the
        new values. The participant lock (database.participant_lock) comes first, as for any write of
        a participant's rows."""
        self.session.flush()
        for user_id in sorted({e["user_id"] for e in events}):
            hold_participant(self.session, user_id)
        if recalled:
            self._core(_RECALL_UPDATE, [dict(r) for r in recalled])
            for r in recalled:
                loaded = self.session.identity_map.get(self.session.identity_key(Message, r["memory_id"]))
                if loaded is not None:
                    self.session.expire(loaded, ["consolidation_g", "recall_count", "last_recall_at"])
        if events:
            self._core(_RECALL_EVENTS, [dict(e) for e in events])

    def user_message_times(self, user_id: int, after: datetime, upto: datetime) -> list[datetime]:
        """When the participant sent each message in (after, upto]."""
        return list(self.session.scalars(
            select(Message.created_at).where(Message.user_id == user_id, Message.role == "user",
                                             Message.created_at > after, Message.created_at <= upto)
        ).all())
