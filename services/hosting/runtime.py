"""The app's composition root: one Runtime per Flask app holds the settings, the database,
the clock, the providers and the background runner, so routes, the CLI, the scheduler
and tests all build the same objects."""
from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from database.db_manager import BACKGROUND_POOL_SIZE, Database
from services.llm.chain import LLMService
from services.llm.embedding_service import EmbeddingProvider, build_embedder, check_embedder_pinned
from services.llm.factory import build_llm_service
from services.memory import registry
from services.platform.background import BackgroundRunner
from services.platform.clock import Clock
from services.platform.failure_log import make_failure_recorder
from services.study.definition import Study
from services.study.settings import Settings
from services.study.versions import StudyVersions, pinned_study


@dataclass
class Runtime:
    settings: Settings
    db: Database
    clock: Clock
    background: BackgroundRunner
    llm: LLMService | None = None
    consolidation_llm: LLMService | None = None  # CONSOLIDATION_PROVIDERS, else the reply chain
    record_failure: Callable[[dict[str, Any]], None] | None = None
    # background work's own pool (scheduler jobs, consolidation, memory upkeep): a request pool
    # starved by a class never stops it, and it never takes the requests' connections
    jobs_db: Database | None = None
    # the published study versions (services.study.versions); None: the file's study only, as before
    studies: StudyVersions | None = None
    _embedder: EmbeddingProvider | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def study(self) -> Study:
        """The study this request runs under: the version it was pinned to (a running task's), else the live one."""
        return pinned_study() or self.settings.study

    def study_for(self, version: int | None) -> Study:
        """The published version ``version`` (a task session's), else the request's study."""
        if version is None or self.studies is None or version == self.study.version:
            return self.study
        return self.studies.study(version)

    def start_study_versions(self) -> None:
        """Import the start-up definition as a version (when new) and serve the live version from now on."""
        def switch(study: Study) -> None:
            self.settings.study = study

        self.studies = StudyVersions(self.db.Session, refresh_seconds=self.settings.study_refresh_seconds,
                                     on_change=switch)
        self.settings.study = self.studies.start(self.settings.study, self.clock)

    @property
    def embedder(self) -> EmbeddingProvider:
        """Built on first use: loading the embedding model is not needed to serve a login page."""
        with self._lock:
            if self._embedder is None:
                self._embedder = build_embedder(self.settings, on_failure=self.record_failure)
            return self._embedder

    @embedder.setter
    def embedder(self, value: EmbeddingProvider) -> None:
        self._embedder = value

    @property
    def background_db(self) -> Database:
        return self.jobs_db or self.db

    def for_jobs(self) -> Runtime:
        """This runtime with ``db`` on the background pool (the same providers and embedder), for
        the scheduler's jobs."""
        return replace(self, db=self.background_db, _embedder=self.embedder, _lock=threading.Lock())


def build_runtime(settings: Settings, *, clock: Clock | None = None, db: Database | None = None,
                  llm: LLMService | None = None) -> Runtime:
    registry.check_study(settings.study)  # before anything is built: a study that cannot run never serves
    if db is None:
        serving = settings.serving
        db = Database(settings.database_url, busy_timeout=settings.db_busy_timeout_seconds,
                      pool_size=serving.db_pool_size, max_overflow=serving.db_max_overflow,
                      pool_timeout=serving.db_pool_timeout, prepared_statements=serving.db_prepared_statements)
    clock = clock or Clock()
    # one recorder per app: failed provider calls land in provider_failures, where admins see them
    recorder = make_failure_recorder(db, clock)
    runtime = Runtime(settings=settings, db=db, clock=clock, jobs_db=db.sibling(BACKGROUND_POOL_SIZE),
                      background=BackgroundRunner(inline=settings.consolidate_inline), record_failure=recorder)
    runtime.llm = llm or build_llm_service(settings, on_failure=recorder)
    runtime.consolidation_llm = (
        build_llm_service(settings, chain=settings.consolidation_providers, on_failure=recorder)
        if settings.consolidation_providers and llm is None else runtime.llm)
    return runtime


def check_embedder(runtime: Runtime) -> None:
    """Refuse to run a study whose stored vectors come from another embedding model."""
    with runtime.db.Session() as session:
        check_embedder_pinned(session, runtime.embedder)
