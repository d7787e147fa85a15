"""Storage queries behind forgetting-curve recall: the participant's consolidated message vectors
and the index-backed checks that tell whether a cached copy of them is still current.

The recall algorithm itself (top-k, forgetting curve, the matrix cache) lives in
``services.memory.hybrid``; this module stores and queries only.
"""
from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Row, func, select
from sqlalchemy.orm import Session

from database.models import ConsolidationRun, Message


class VectorStore:
    """Queries over one database session; flushes and commits nothing."""

    def __init__(self, session: Session) -> None:
        self.session = session

    def database_key(self) -> str:
        """Names the database, so caches of two databases in one process never mix."""
        return str(self.session.get_bind().url)

    @staticmethod
    def _consolidated(user_id: int) -> tuple[Any, ...]:
        return (Message.user_id == user_id, Message.role == "user", Message.embedding.is_not(None),
                Message.consolidated_at.is_not(None))

    def _runs_state_query(self, user_id: int) -> Any:
        """Changes whenever a consolidation run of the participant starts, finishes or fails."""
        return (select(func.count(ConsolidationRun.id), func.max(ConsolidationRun.id),
                       func.max(func.coalesce(ConsolidationRun.finished_at, ConsolidationRun.started_at)))
                .where(ConsolidationRun.user_id == user_id))

    def runs_state(self, user_id: int) -> tuple[str, ...]:
        """The participant's consolidation runs (count, newest, last start/finish), as strings."""
        return tuple(str(v) for v in self.session.execute(self._runs_state_query(user_id)).one())

    def cache_state(self, user_id: int, max_id: int) -> tuple[tuple[str, ...], bool]:
        """``runs_state`` and whether a memory newer than ``max_id`` exists, in one round trip (a warm
        recall asks both before every use of its cached index). The newer check is a range scan over the
        (user_id, id) index that only reaches messages written since."""
        runs = self._runs_state_query(user_id).subquery()
        newer = select(Message.id).where(*self._consolidated(user_id), Message.id > max_id).limit(1)
        row = self.session.execute(
            select(runs, newer.scalar_subquery().label("newer"))
        ).one()
        return tuple(str(v) for v in row[:3]), row[3] is not None

    def consolidated_vectors(self, user_id: int) -> Sequence[Row]:
        """Every consolidated user message of the participant with its embedding, oldest first."""
        return self.session.execute(
            select(Message.id, Message.task_session_id, Message.task_id, Message.embedding_model, Message.embedding,
                   Message.content, Message.emotional_salience, Message.emotional_intensity, Message.self_disclosure,
                   Message.value_relevance)
            .where(*self._consolidated(user_id)).order_by(Message.id)
        ).all()

    def replies(self, user_id: int) -> dict[int, str]:
        """The assistant's reply to each of the participant's messages (the latest, if it was regenerated)."""
        rows = self.session.execute(
            select(Message.reply_to_id, Message.content).where(
                Message.user_id == user_id, Message.role == "assistant", Message.reply_to_id.is_not(None))
            .order_by(Message.id)
        ).all()
        return {r.reply_to_id: r.content for r in rows}

    def messages(self, ids: Sequence[int]) -> dict[int, Message]:
        """Message rows by id (rows of this session, so they can be updated)."""
        if not ids:
            return {}
        return {m.id: m for m in self.session.scalars(select(Message).where(Message.id.in_(list(ids))))}

    def user_message_times(self, user_id: int, after: datetime, upto: datetime) -> list[datetime]:
        """When the participant sent each message in (after, upto]."""
        return list(self.session.scalars(
            select(Message.created_at).where(Message.user_id == user_id, Message.role == "user",
                                             Message.created_at > after, Message.created_at <= upto)
        ).all())
