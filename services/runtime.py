"""The app's composition root: one Runtime per Flask app holds the settings, the database,
the clock, the providers and the background runner, so routes, the CLI, the scheduler
and tests all build the same objects."""
from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from typing import Any

from config import Settings
from database.db_manager import Database
from services.background import BackgroundRunner
from services.clock import Clock
from services.llm_service import LLMService, build_llm_service

log = logging.getLogger(__name__)


@dataclass
class Runtime:
    settings: Settings
    db: Database
    clock: Clock
    background: BackgroundRunner
    llm: LLMService | None = None
    _embedder: Any = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def study(self) -> dict[str, Any]:
        return self.settings.study

    @property
    def embedder(self):
        """Built on first use: loading the embedding model is not needed to serve a login page."""
        with self._lock:
            if self._embedder is None:
                from services.embedding_service import build_embedder

                self._embedder = build_embedder(self.settings)
            return self._embedder

    @embedder.setter
    def embedder(self, value) -> None:
        self._embedder = value

    def record_failure(self, attempt: dict[str, Any]) -> None:
        """Write a failed provider attempt to the admin's failure log. A failure to log must not
        stop the fallback chain from answering the participant, so it is itself only logged."""
        try:
            from services.failure_log import make_failure_recorder

            make_failure_recorder(self.db, self.clock)(attempt)
        except Exception:
            log.exception("could not record provider failure %s", attempt.get("error_class"))


def build_runtime(settings: Settings, *, clock: Clock | None = None, db: Database | None = None,
                  llm: LLMService | None = None) -> Runtime:
    runtime = Runtime(
        settings=settings,
        db=db or Database(settings.database_url),
        clock=clock or Clock(),
        background=BackgroundRunner(inline=settings.consolidate_inline),
    )
    runtime.llm = llm or build_llm_service(settings, on_failure=runtime.record_failure)
    return runtime
