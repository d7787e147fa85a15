"""MemoryEngine: builds the memory context of a reply by asking the participant's condition."""
from __future__ import annotations

from sqlalchemy.orm import Session

from database.models import Message, TaskSession
from services.llm.embedding_service import EmbeddingProvider
from services.memory import registry
from services.memory.base import BuildRequest
from services.memory.context import MemoryContext
from services.platform.clock import SECONDS_PER_DAY, Clock
from services.recall.parameters import RecallParams
from services.study.definition import Study


class MemoryEngine:
    """What the assistant is allowed to remember, per memory condition."""

    def __init__(self, session: Session, study: Study, *, embedder: EmbeddingProvider | None = None,
                 clock: Clock | None = None, day_seconds: float = SECONDS_PER_DAY,
                 recall_params: RecallParams | None = None, defer_writes: bool = False) -> None:
        # defer_writes: writes a build computes (L4's recall) are left on context.deferred for the caller,
        # who runs them with the reply; otherwise they are written here.
        self.session = session
        self.study = study
        self.embedder = embedder
        self.clock = clock or Clock()
        self.day_seconds = float(day_seconds)
        self.recall_params = recall_params or study.memory.recall
        self.defer_writes = defer_writes

    def build_context(self, *, user_id: int, memory_group: str, task_session: TaskSession,
                      query: Message | None, language: str = "zh") -> MemoryContext:
        condition = registry.get(memory_group)
        context = MemoryContext(group=memory_group, language=language)
        condition.build(BuildRequest(session=self.session, study=self.study, user_id=user_id,
                                     task_session=task_session, query=query, clock=self.clock,
                                     day_seconds=self.day_seconds, embedder=self.embedder,
                                     recall_params=self.recall_params), context)
        if not self.defer_writes:
            for write in context.deferred:
                write.write(self.session)
            context.deferred.clear()
        return context
