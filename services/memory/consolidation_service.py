"""Consolidation: what a finished task leaves in long-term memory.

Run after a task's chat has closed - by the chat service off the request path
(``trigger="task_end"``), by the scheduler's sweep, or by hand
(``scripts/manual_consolidation.py``, ``flask consolidate``). For one task session:

1. **Profile (conditions that ``consolidates_profile``)**: the task's conversation is merged into the participant's
   latest gist profile (``services.memory.profile.schema``), by the consolidation LLM chain or,
   when that chain is answered by the offline template responder (not an LLM),
   by the rule-based extractor (``source="offline-rules"``). Every success writes
   a new ``ProfileVersion`` (kind ``gist``); old versions stay. An LLM answer
   that is still invalid after one repair request, or a chain that fails
   entirely, fails the run: the previous profile stays current and the failure
   is logged (``ProviderFailure``); the sweep retries the session later.
2. **Per-message memory fields, for every group**: embedding, importance, the
   three salience scores, ``emotional_salience`` and ``consolidation_g = g0``.
   Only L4 reads them for recall, but they are filled for all groups so that
   salience and disclosure can be compared across conditions in the analysis,
   and so a study may switch a participant's data to another analysis later.
3. **The condition's own memory**: the participant's condition may keep its own long-term memory
   (R1's recursive memory, ``services.memory.recursive_summary``), updated via ``MemoryCondition.consolidate``.

Idempotent and crash-safe: a session whose consolidation succeeded is skipped.
A run first claims the session and records a ``running`` ConsolidationRun in
its own committed transaction; slow work (LLM calls, embeddings) happens with
no transaction open; then the profile version, every message field, the
session's status and the run's ``succeeded`` mark are written in ONE
transaction. A failure rolls all of that back and records ``failed`` in its own
transaction, so a rerun starts from exactly the state a clean run would have
started from. A run that died without recording anything (killed process)
holds its claim only for ``lease_seconds``; after that a rerun takes over.

Messages that carry no content ("好的，谢谢") are consolidated like any other, but
are not recall candidates (``CandidateRule``, applied by the
forgetting-curve search, ``services.memory.hybrid``); the run's
``steps["messages"]["not_recall_candidates"]`` lists them.

Importance (``Message.importance_score``) is how much lasting information about
the person a message carries: half from the durable personal facts the rule
extractor finds in it (two or more facts count fully), half from its emotional
salience. It is recorded for analysis; recall does not use it.
"""
from __future__ import annotations

import logging
import threading
import traceback
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import and_, exists, func, or_, select, update
from sqlalchemy.orm import Session

from database.db_manager import Database, transaction
from database.models import ConsolidationRun, Message, ProfileVersion, ProviderFailure, TaskSession, User
from database.participant_lock import ParticipantErased, hold_participant
from services.llm.chain import LLMService
from services.llm.embedding_service import EmbeddingProvider, build_embedder, to_blob
from services.llm.factory import build_llm_service
from services.llm.types import AllProvidersFailed
from services.memory import registry
from services.memory.base import Upkeep
from services.memory.profile.extraction import extract_profile_delta
from services.memory.profile.llm_merge import ProfileUpdateFailed, update_profile_with_llm
from services.memory.profile.schema import (
    apply_delta,
    empty_profile,
    profile_diff,
    render_profile,
    validation_errors,
)
from services.platform.clock import Clock
from services.platform.failure_log import failure_values
from services.recall.formulas import initial_g
from services.recall.salience import SalienceScores, lexicon_scores, parse_salience_response, salience_request
from services.study.definition import Study
from services.study.settings import Settings
from services.text.languages import detect

log = logging.getLogger(__name__)

READY_STATUSES = ("done", "abandoned")
RETRYABLE = ("pending", "failed")
OFFLINE_RULES = "offline-rules"
StepHook = Callable[[str], None]


class ConsolidationAborted(Exception):
    """The run lost its claim (another worker took over a stale lease) before writing."""


@dataclass
class RunSummary:
    """What one call to ``consolidate_task_session`` did (or, in a dry run, would do)."""

    task_session_id: int
    status: str  # succeeded | failed | skipped | busy | deferred | not_ready | not_found | dry_run
    trigger: str
    run_id: int | None = None
    user_id: int | None = None
    task_id: str | None = None
    memory_group: str | None = None
    reason: str | None = None
    error: str | None = None
    steps: dict[str, Any] = field(default_factory=dict)
    changes: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class _Plan:
    """Everything a run computed before writing."""

    steps: dict[str, Any] = field(default_factory=dict)
    profile: dict[str, Any] | None = None
    profile_source: str | None = None
    rendered: str = ""
    message_fields: dict[int, dict[str, Any]] = field(default_factory=dict)
    failures: list[dict[str, Any]] = field(default_factory=list)
    provider: str | None = None


class ConsolidationService:
    """Consolidates finished task sessions; see the module docstring for the guarantees."""

    def __init__(self, db: Database | Callable[[], Session], settings: Settings, *, llm: LLMService | None = None,
                 embedder: EmbeddingProvider | None = None, clock: Clock | None = None,
                 step_hook: StepHook | None = None, lease_seconds: float | None = None,
                 heartbeat_seconds: float | None = None) -> None:
        self.settings = settings
        self.study: Study = settings.study
        self.clock = clock or Clock()
        self._session_factory = db.Session if hasattr(db, "Session") else db
        self._llm = llm
        self._llm_resolved = False
        self._embedder = embedder
        self.step_hook = step_hook
        # a dead run's claim lasts settings.consolidation_lease: 900 s, scaled with the day in pilot mode
        self.lease = timedelta(seconds=settings.consolidation_lease if lease_seconds is None else lease_seconds)
        # a live run renews its lease this often (real seconds), so only a dead one ever expires
        self.heartbeat_seconds = (heartbeat_seconds if heartbeat_seconds is not None
                                  else self.lease.total_seconds() / 4)

    # -- wiring ----------------------------------------------------------------

    @property
    def llm(self) -> LLMService:
        """The given chain (the app passes its consolidation chain), else CONSOLIDATION_PROVIDERS,
        else LLM_PROVIDERS."""
        if not self._llm_resolved:
            chain = getattr(self.settings, "consolidation_providers", None)
            if self._llm is None:
                self._llm = build_llm_service(self.settings, chain or self.settings.llm_providers)
            elif not hasattr(self._llm, "providers"):
                self._llm = LLMService([self._llm])  # a bare ChatProvider
            self._llm_resolved = True
        return self._llm

    @property
    def embedder(self):
        if self._embedder is None:
            self._embedder = build_embedder(self.settings)
        return self._embedder

    def _session(self) -> AbstractContextManager[Session]:
        return transaction(self._session_factory)

    def _step(self, name: str) -> None:
        if self.step_hook is not None:
            self.step_hook(name)

    # -- queries -----------------------------------------------------------------

    def pending_task_sessions(self, *, user_id: int | None = None) -> list[int]:
        """Ids of closed task sessions (done or abandoned) whose consolidation is pending or failed, oldest first."""
        with self._session() as session:
            query = select(TaskSession.id).where(TaskSession.status.in_(READY_STATUSES),
                                                 or_(TaskSession.consolidation_status.in_(RETRYABLE),
                                                     and_(TaskSession.consolidation_status == "running",
                                                          ~self._live_run(TaskSession.id))))
            if user_id is not None:
                query = query.where(TaskSession.user_id == user_id)
            return list(session.scalars(query.order_by(TaskSession.started_at, TaskSession.id)))

    def unconsolidated(self, user_id: int) -> list[dict[str, Any]]:
        """The participant's closed tasks whose memory is not consolidated yet, oldest first; a task another
        run is consolidating carries that run's start and the end of its lease (``lease_until``)."""
        live = {run["task_session_id"]: run for run in self.live_runs(user_id=user_id)}
        with self._session() as session:
            rows = session.scalars(select(TaskSession).where(
                TaskSession.user_id == user_id, TaskSession.status != "reset",
                TaskSession.consolidation_status.in_((*RETRYABLE, "running")),
            ).order_by(TaskSession.started_at, TaskSession.id)).all()
            return [{"task_session_id": ts.id, "task_id": ts.task_id, "consolidation_status": ts.consolidation_status,
                     **({k: live[ts.id][k] for k in ("running_since", "lease_until")} if ts.id in live else {})}
                    for ts in rows if _chat_closed(ts)]

    def live_runs(self, *, user_id: int | None = None) -> list[dict[str, Any]]:
        """Runs holding their task's claim now (running, lease not expired), oldest first: a run at work, or one
        whose process died and whose claim lasts until ``lease_until``."""
        with self._session() as session:
            query = select(ConsolidationRun).where(ConsolidationRun.status == "running",
                                                   ConsolidationRun.started_at > self.clock.now() - self.lease)
            if user_id is not None:
                query = query.where(ConsolidationRun.user_id == user_id)
            return [{"run_id": run.id, "task_session_id": run.task_session_id, "user_id": run.user_id,
                     "task_id": run.task_id, "running_since": run.started_at,
                     "lease_until": run.started_at + self.lease}
                    for run in session.scalars(query.order_by(ConsolidationRun.started_at))]

    def consolidate_all_pending(self, *, user_id: int | None = None, trigger: str = "sweep",
                                dry_run: bool = False) -> list[RunSummary]:
        """Consolidate every pending session (optionally one participant's); one failure does not stop the rest."""
        return [self.consolidate_task_session(ts_id, trigger=trigger, dry_run=dry_run)
                for ts_id in self.pending_task_sessions(user_id=user_id)]

    # -- one session ---------------------------------------------------------------

    def consolidate_task_session(self, task_session_id: int, trigger: str = "task_end",
                                 dry_run: bool = False) -> RunSummary:
        summary = RunSummary(task_session_id=task_session_id, status="not_found", trigger=trigger)
        with self._session() as session:
            ts = session.get(TaskSession, task_session_id)
            if ts is None:
                summary.reason = "no such task session"
                return summary
            summary.user_id, summary.task_id = ts.user_id, ts.task_id
            not_ready = self._not_ready_reason(session, ts)
            if not_ready:
                summary.status, summary.reason = not_ready
                return summary
            earlier = self._earlier_unconsolidated(session, ts)
        # Profiles merge incrementally, so an earlier task must be consolidated first.
        for earlier_id in earlier:
            if dry_run:
                summary.steps.setdefault("earlier_unconsolidated", []).append(earlier_id)
                continue
            if self.consolidate_task_session(earlier_id, trigger=trigger).status != "succeeded":
                summary.status = "deferred"
                summary.reason = f"earlier task session {earlier_id} could not be consolidated"
                return summary
        if dry_run:
            return self._dry_run(task_session_id, summary)
        run_id = self._claim(task_session_id, trigger)
        if run_id is None:
            summary.status, summary.reason = "busy", "another consolidation of this session is running"
            return summary
        summary.run_id = run_id
        plan = _Plan()
        try:
            with self._heartbeat(run_id):
                self._step("claimed")
                self._compute(task_session_id, plan)
                self._write(task_session_id, run_id, plan, summary)
        except Exception as exc:  # any failure: nothing of the run is written; record it and move on
            log.warning("consolidation of task session %s failed: %s", task_session_id, exc)
            self._record_failure(task_session_id, run_id, plan, exc)
            summary.status, summary.error, summary.steps = "failed", _short(exc), plan.steps
            return summary
        summary.status, summary.steps = "succeeded", plan.steps
        return summary

    def _not_ready_reason(self, session: Session, ts: TaskSession) -> tuple[str, str] | None:
        if ts.status == "reset" or ts.consolidation_status == "n/a":
            return "skipped", "a reset attempt is not memory"
        succeeded = session.scalar(select(ConsolidationRun.id).where(
            ConsolidationRun.task_session_id == ts.id, ConsolidationRun.status == "succeeded").limit(1))
        if succeeded is not None or ts.consolidation_status == "done":
            return "skipped", "already consolidated"
        if not _chat_closed(ts):
            return "not_ready", "the task's chat is still open"
        return None

    def _earlier_unconsolidated(self, session: Session, ts: TaskSession) -> list[int]:
        rows = session.scalars(select(TaskSession).where(
            TaskSession.user_id == ts.user_id, TaskSession.id != ts.id, TaskSession.started_at <= ts.started_at,
            TaskSession.status != "reset", TaskSession.consolidation_status.in_((*RETRYABLE, "running")),
        ).order_by(TaskSession.started_at, TaskSession.id)).all()
        return [row.id for row in rows if _chat_closed(row) and (row.started_at, row.id) < (ts.started_at, ts.id)]

    def _claim(self, task_session_id: int, trigger: str) -> int | None:
        """Mark the session running and open a run row, atomically; None when another live run holds it."""
        now = self.clock.now()
        live_run = self._live_run(task_session_id)
        with self._session() as session:
            owner = session.scalar(select(TaskSession.user_id).where(TaskSession.id == task_session_id))
            if owner is None:  # erased
                return None
            hold_participant(session, owner)  # before the first write (database.participant_lock)
            claimed = session.execute(
                update(TaskSession)
                .where(TaskSession.id == task_session_id,
                       or_(TaskSession.consolidation_status.in_(RETRYABLE),
                           and_(TaskSession.consolidation_status == "running", ~live_run)))
                .values(consolidation_status="running")
                .execution_options(synchronize_session=False)
            ).rowcount
            if claimed != 1:
                return None
            # PostgreSQL re-checks a blocked UPDATE's WHERE on the row another claim just committed, but
            # its EXISTS still sees the snapshot from before that claim's run row: look again, now.
            if session.scalar(select(self._live_run(task_session_id))):
                session.rollback()
                return None
            for stale in session.scalars(select(ConsolidationRun).where(
                    ConsolidationRun.task_session_id == task_session_id, ConsolidationRun.status == "running")):
                stale.status, stale.finished_at = "failed", now
                stale.error = "abandoned: the run stopped without finishing and its lease expired"
            ts = session.get(TaskSession, task_session_id)
            run = ConsolidationRun(user_id=ts.user_id, task_session_id=ts.id, task_id=ts.task_id, trigger=trigger,
                                   status="running", started_at=now, steps={})
            session.add(run)
            session.flush()
            return run.id

    def _live_run(self, task_session_id):
        """EXISTS a running run for the session whose lease has not expired: a live run renews it
        (``_heartbeat``), a killed run's lapses ``lease_seconds`` after its last sign of life."""
        last_alive = func.coalesce(ConsolidationRun.heartbeat_at, ConsolidationRun.started_at)
        return exists().where(ConsolidationRun.task_session_id == task_session_id,
                              ConsolidationRun.status == "running", last_alive > self.clock.now() - self.lease)

    @contextmanager
    def _heartbeat(self, run_id: int) -> Iterator[None]:
        """While the block runs, renew the run's lease every ``heartbeat_seconds`` from a thread of its
        own, so a run slower than its lease (a slow model) is never taken for dead and done twice."""
        stop = threading.Event()

        def beat() -> None:
            while not stop.wait(self.heartbeat_seconds):
                try:
                    with self._session() as session:
                        session.execute(update(ConsolidationRun).where(
                            ConsolidationRun.id == run_id, ConsolidationRun.status == "running")
                            .values(heartbeat_at=self.clock.now()).execution_options(synchronize_session=False))
                except Exception:  # the next beat tries again; the lease has room for missed ones
                    log.warning("consolidation run %s: heartbeat not written", run_id, exc_info=True)

        thread = threading.Thread(target=beat, name=f"consolidation-heartbeat-{run_id}", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()

    # -- computing (no transaction open) -------------------------------------------------

    def _load(self, task_session_id: int) -> dict[str, Any]:
        with self._session() as session:
            ts = session.get(TaskSession, task_session_id)
            user = session.get(User, ts.user_id)
            messages = session.scalars(select(Message).where(Message.task_session_id == ts.id)
                                       .order_by(Message.id)).all()
            latest = _latest_profile(session, ts.user_id)
            return {
                "user_id": user.id, "task_id": ts.task_id, "group": user.memory_group,
                "user_language": user.language,
                "conversation": [(m.role, m.content) for m in messages],
                "user_messages": [(m.id, m.content) for m in messages if m.role == "user"],
                "previous": latest.content if latest else None,
                "previous_version": latest.version if latest else 0,
            }

    def _compute(self, task_session_id: int, plan: _Plan) -> dict[str, Any]:
        data = self._load(task_session_id)
        texts = [text for _, text in data["user_messages"]]
        language = detect(texts, default=data["user_language"] or "zh")
        plan.steps["input"] = {"user_messages": len(texts), "language": language, "memory_group": data["group"],
                               "previous_profile_version": data["previous_version"]}
        extraction = extract_profile_delta(data["user_messages"])
        if registry.get(data["group"]).consolidates_profile:
            self._compute_profile(data, language, extraction, plan)
        else:
            plan.steps["profile"] = {"status": "skipped", "reason": f"group {data['group']} reads no profile"}
        self._step("profile")
        scores = self._compute_salience(data, language, plan)
        self._step("salience")
        try:
            vectors = self.embedder.embed_passages(texts) if texts else []
        except Exception as exc:
            plan.failures.append({"provider": getattr(self.embedder, "name", "embedder"),
                                  "model": getattr(self.embedder, "model", None), "purpose": "embedding",
                                  "error_class": getattr(exc, "kind", type(exc).__name__), "error": _short(exc),
                                  "status_code": getattr(exc, "status_code", None), "user_id": data["user_id"]})
            plan.steps["embeddings"] = {"status": "failed", "error": _short(exc)}
            raise
        plan.steps["embeddings"] = {"status": "done", "count": len(texts),
                                    "model": getattr(self.embedder, "model", None)}
        self._step("embeddings")
        params = self.study.memory.recall
        weights = dict(self.study.memory.salience_weights)
        for index, (message_id, _) in enumerate(data["user_messages"]):
            score = scores[message_id]
            salience = score.salience(weights)
            facts = min(1.0, extraction.facts_per_message.get(message_id, 0) / 2)
            plan.message_fields[message_id] = {
                "embedding": to_blob(vectors[index]),
                "embedding_model": getattr(self.embedder, "model", None),
                "emotional_intensity": score.intensity,
                "self_disclosure": score.disclosure,
                "value_relevance": score.value,
                "emotional_salience": salience,
                "importance_score": round(0.5 * facts + 0.5 * salience, 6),
                "consolidation_g": initial_g(salience, params.g0_base, params.g0_salience),
            }
        # Recorded, not enforced here: the forgetting-curve search applies the rule at recall time, so a changed rule
        # takes effect without re-consolidating, and every message keeps its embedding for analysis.
        without_content = [mid for mid, text in data["user_messages"]
                           if not params.candidates.admits_text(text, plan.message_fields[mid]["emotional_salience"])]
        plan.steps["messages"] = {"status": "done", "count": len(plan.message_fields),
                                  "not_recall_candidates": without_content}
        return data

    def _compute_profile(self, data: dict[str, Any], language: str, extraction, plan: _Plan) -> None:
        previous = data["previous"]
        task_id = data["task_id"]
        cap = self.study.memory.gist_max_chars
        step: dict[str, Any] = {"previous_version": data["previous_version"]}
        llm = self.llm
        if llm.primary.name == "offline":
            step["reason"] = "the consolidation chain starts with the offline template responder (not an LLM)"
            profile, source = apply_delta(previous or empty_profile(), extraction.delta, task_id), OFFLINE_RULES
        else:
            try:
                update_ = update_profile_with_llm(llm, previous, data["conversation"], task_id=task_id,
                                                  language=language, user_id=data["user_id"])
            except AllProvidersFailed as exc:
                plan.failures.extend(self._unreported(exc.attempts))
                step.update(status="failed", error="every provider in the consolidation chain failed")
                plan.steps["profile"] = step
                raise
            except ProfileUpdateFailed as exc:
                result = exc.result
                plan.failures.extend(self._unreported(result.attempts if result else []))
                plan.failures.append({"provider": result.provider if result else "unknown",
                                      "model": result.model if result else None, "error_class": "InvalidProfileJSON",
                                      "error": str(exc)[:500], "purpose": "consolidation",
                                      "user_id": data["user_id"]})
                step.update(status="failed", error=str(exc)[:500], answers=[a[:2000] for a in exc.answers])
                plan.steps["profile"] = step
                raise
            plan.failures.extend(self._unreported(update_.attempts))
            if update_.result.provider == "offline":
                step["reason"] = "the chain fell back to the offline template responder (not an LLM)"
                profile = apply_delta(previous or empty_profile(), extraction.delta, task_id)
                source = OFFLINE_RULES
            else:
                profile, source = update_.profile, f"{update_.result.provider}/{update_.result.model}"[:64]
                step.update(repaired=update_.repaired, model=update_.result.model)
                plan.provider = update_.result.provider
        errors = validation_errors(profile)
        if errors:  # the rule path and the LLM path are validated by the same schema
            step.update(status="failed", error="; ".join(errors[:5]))
            plan.steps["profile"] = step
            raise ValueError(f"consolidated profile is invalid: {errors[0]}")
        plan.profile, plan.profile_source = profile, source
        plan.rendered = render_profile(profile, language=language, max_chars=cap)
        plan.provider = plan.provider or source
        step.update(status="done", source=source, diff=profile_diff(previous, profile),
                    rendered_chars=len(plan.rendered))
        plan.steps["profile"] = step

    def _compute_salience(self, data: dict[str, Any], language: str, plan: _Plan) -> dict[int, SalienceScores]:
        messages = data["user_messages"]
        scores = {mid: lexicon_scores(text) for mid, text in messages}
        step: dict[str, Any] = {"source": "lexicon"}
        llm = self.llm
        if messages and llm.primary.name != "offline":
            try:
                result = llm.complete(salience_request(messages, language, user_id=data["user_id"]))
                plan.failures.extend(self._unreported(result.attempts))
                if result.provider != "offline":
                    from_llm = parse_salience_response(result.text, [mid for mid, _ in messages])
                    scores.update(from_llm)
                    step = {"source": "llm" if len(from_llm) == len(messages) else "llm+lexicon",
                            "provider": result.provider, "model": result.model,
                            "lexicon_filled": len(messages) - len(from_llm)}
            except AllProvidersFailed as exc:
                plan.failures.extend(self._unreported(exc.attempts))
                step["reason"] = "every provider failed; lexicon scores used"
            except ValueError as exc:
                step["reason"] = f"unusable answer ({_short(exc)}); lexicon scores used"
        plan.steps["salience"] = step
        return scores

    def _unreported(self, attempts: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Failed attempts to log here; a chain with its own failure hook has logged them already."""
        if getattr(self.llm, "on_failure", None) is not None:
            return []
        return [a for a in attempts if not a.get("ok") and not a.get("skipped")]

    # -- writing (one transaction) --------------------------------------------------------

    def _write(self, task_session_id: int, run_id: int, plan: _Plan, summary: RunSummary) -> None:
        now = self.clock.now()
        with self._session() as session:
            run = session.get(ConsolidationRun, run_id)
            ts = session.get(TaskSession, task_session_id)
            if run is None or ts is None:
                raise ConsolidationAborted("the participant was erased")
            if run.status != "running" or ts.consolidation_status != "running":
                raise ConsolidationAborted("the run lost its claim on the session")
            user = session.get(User, ts.user_id)
            # First, before this transaction writes anything: a condition's own update may call a model,
            # and on SQLite a write lock held meanwhile would stall every participant's chat.
            self._consolidate_condition(session, user, ts, run, plan)
            if plan.profile is not None:
                version = (session.scalar(select(func.max(ProfileVersion.version)).where(
                    ProfileVersion.user_id == ts.user_id, ProfileVersion.kind == "gist")) or 0) + 1
                session.add(ProfileVersion(user_id=ts.user_id, kind="gist", version=version, task_id=ts.task_id,
                                           content=plan.profile, rendered=plan.rendered, source=plan.profile_source,
                                           consolidation_run_id=run_id, created_at=now))
                plan.steps["profile"]["version"] = version
            for message in session.scalars(select(Message).where(Message.id.in_(list(plan.message_fields)))):
                for name, value in plan.message_fields[message.id].items():
                    setattr(message, name, value)
                message.consolidated_at = now
            session.add_all(self._failure_rows(plan.failures, now, ts.user_id))
            ts.consolidation_status = "done"
            run.status, run.finished_at, run.steps, run.provider = "succeeded", now, plan.steps, plan.provider
            summary.memory_group = user.memory_group
            summary.changes = {"profile_version": plan.steps.get("profile", {}).get("version"),
                               "messages": len(plan.message_fields)}
            session.flush()
            self._step("before_commit")

    def _consolidate_condition(self, session: Session, user: User, ts: TaskSession, run: ConsolidationRun,
                               plan: _Plan) -> None:
        upkeep = Upkeep(llm=self.llm, clock=self.clock, study=self.study)
        step = registry.get(user.memory_group).consolidate(session, upkeep, user=user, task_session=ts, run=run)
        if step is None:
            return
        plan.steps[step.key] = step.result
        if step.failure is not None:
            # Fail the run so the sweep retries it; the failure row is written with the run's failure.
            plan.failures.append({"provider": "consolidation", "error_class": step.failure_class,
                                  "error": step.failure, "user_id": user.id})
            raise ValueError(step.failure_message or step.failure)

    def _record_failure(self, task_session_id: int, run_id: int, plan: _Plan, exc: Exception) -> None:
        now = self.clock.now()
        try:
            self._write_failure(task_session_id, run_id, plan, exc, now)
        except ParticipantErased:
            log.info("consolidation failure of task session %s not recorded: the participant was erased",
                     task_session_id)

    def _write_failure(self, task_session_id: int, run_id: int, plan: _Plan, exc: Exception, now: datetime) -> None:
        with self._session() as session:
            run = session.get(ConsolidationRun, run_id)
            ts = session.get(TaskSession, task_session_id)
            if run is None or ts is None:  # erased since: nothing of theirs is recorded
                return
            if run.status == "running":
                run.status, run.finished_at = "failed", now
                run.error = "".join(traceback.format_exception_only(type(exc), exc)).strip()[:2000]
                run.steps = plan.steps
                if ts.consolidation_status == "running":
                    ts.consolidation_status = "failed"
            session.add_all(self._failure_rows(plan.failures, now, ts.user_id))

    @staticmethod
    def _failure_rows(failures: list[dict[str, Any]], now, user_id: int) -> list[ProviderFailure]:
        rows = []
        for failure in failures:
            values = failure_values({"purpose": "consolidation", **failure}, now)
            values["user_id"] = values["user_id"] or user_id
            rows.append(ProviderFailure(**values))
        return rows

    # -- dry run --------------------------------------------------------------------

    def _dry_run(self, task_session_id: int, summary: RunSummary) -> RunSummary:
        """Compute everything a run would write and report it; write nothing."""
        plan = _Plan()
        try:
            data = self._compute(task_session_id, plan)
        except Exception as exc:
            summary.status, summary.error, summary.steps = "failed", _short(exc), plan.steps
            return summary
        summary.status, summary.steps, summary.memory_group = "dry_run", plan.steps, data["group"]
        summary.changes = {
            "profile": None if plan.profile is None else {
                "new_version": data["previous_version"] + 1, "source": plan.profile_source,
                "diff": profile_diff(data["previous"], plan.profile), "rendered": plan.rendered},
            "messages": [{"message_id": mid,
                          **{k: round(v, 4) for k, v in fields.items()
                             if k in ("importance_score", "emotional_salience", "consolidation_g")}}
                         for mid, fields in plan.message_fields.items()],
        }
        return summary


def _chat_closed(ts: TaskSession) -> bool:
    return ts.status in READY_STATUSES or (ts.status == "in_progress" and ts.phase != "chat")


def _latest_profile(session: Session, user_id: int) -> ProfileVersion | None:
    return session.scalar(select(ProfileVersion).where(ProfileVersion.user_id == user_id,
                                                       ProfileVersion.kind == "gist")
                          .order_by(ProfileVersion.version.desc()).limit(1))


def _short(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:500]


# ---------------------------------------------------------------------------
# By hand: scripts/manual_consolidation.py and the `flask consolidate` command
# ---------------------------------------------------------------------------


def find_participant_id(service: ConsolidationService, user: str) -> int:
    """A participant's id from a username or a numeric id; ``LookupError`` when there is none."""
    with service._session() as session:
        query = select(User.id).where(User.username == user)
        if user.isdigit():
            query = select(User.id).where(or_(User.id == int(user), User.username == user))
        found = session.scalars(query).all()
    if len(found) != 1:
        raise LookupError(f"no participant {user!r}" if not found else f"{user!r} is ambiguous")
    return found[0]


def manual_consolidation(service: ConsolidationService, *, user: str | None = None, all_pending: bool = False,
                         dry_run: bool = False) -> list[RunSummary]:
    """Consolidate by hand: one participant's pending sessions (``user``: username or id) or all of them.

    ``dry_run`` computes and reports what would change and writes nothing."""
    if (user is None) == (not all_pending):
        raise ValueError("give exactly one of a user or all_pending")
    user_id = find_participant_id(service, user) if user is not None else None
    return service.consolidate_all_pending(user_id=user_id, trigger="manual", dry_run=dry_run)


def describe(summary: RunSummary) -> str:
    """A researcher-readable account of one run (or dry run)."""
    head = (f"task session {summary.task_session_id} (user {summary.user_id}, {summary.task_id}, "
            f"group {summary.memory_group or '-'}): {summary.status}")
    lines = [head + (f" - {summary.reason}" if summary.reason else "") + (f" - {summary.error}" if summary.error
                                                                         else "")]
    if summary.steps.get("earlier_unconsolidated"):
        lines.append("  (computed against the current profile: earlier session(s) "
                     f"{summary.steps['earlier_unconsolidated']} are not consolidated yet)")
    profile = summary.changes.get("profile") if summary.status == "dry_run" else None
    if profile:
        lines.append(f"  profile version {profile['new_version']} ({profile['source']}):")
        lines += [f"    + {item}" for item in profile["diff"]["added"]]
        lines += [f"    - {item}" for item in profile["diff"]["removed"]]
        lines += ["  gist:"] + [f"    {line}" for line in profile["rendered"].splitlines()]
    if summary.status == "dry_run":
        skipped = summary.steps.get("messages", {}).get("not_recall_candidates") or []
        if skipped:
            lines.append(f"  not recall candidates (no content): message(s) {', '.join(map(str, skipped))}")
        for message in summary.changes.get("messages", []):
            lines.append(f"  message {message['message_id']}: salience {message['emotional_salience']:.3f}, "
                         f"importance {message['importance_score']:.3f}, g0 {message['consolidation_g']:.3f}")
    elif summary.status == "succeeded":
        lines.append(f"  profile version {summary.changes.get('profile_version') or '-'}, "
                     f"{summary.changes.get('messages', 0)} message(s) consolidated")
    return "\n".join(lines)
