"""Versioned study definitions in the database: published versions, drafts, publishing, diffs.

The live study is the highest ``study_versions.version``. A definition file (the default study and
``STUDY_CONFIG``) is imported at start-up as a version when no version has its hash yet (``import_file_study``),
so restarting with the same file changes nothing and an edited file becomes the next version. The admin's study
editor saves drafts (``save_draft``: validated, every problem named by its key) and publishes one
(``publish``): a new version, live in every process and on every host within ``refresh_seconds`` (each process
checks the newest version number with one small query at most that often, ``StudyVersions.refresh``).

Participants record the version they enrolled under, and each task session the version it started under; a
request about a running task is answered under that version (``StudyVersions.pin``), so a participant who is
mid-task when a new version is published finishes the task as it began.

Publishing refuses what would break data already collected (``breaking_changes``): removing a condition that
has participants or a task that has sessions, removing or re-scaling a questionnaire item (or an instrument)
that has answers. Once any
participant exists, publishing needs a reason, which goes into the audit log.
"""
from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import replace
from typing import Any

import yaml
from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError, OperationalError, ProgrammingError
from sqlalchemy.orm import Session

from database.models import (
    Assignment,
    AuditLog,
    QuestionnaireResponse,
    StudyDraft,
    StudyVersion,
    TaskSession,
    User,
)
from services.platform.clock import Clock, utc_iso
from services.platform.errors import BadInput, Conflict, NotFound
from services.recall.word_lists import word_list_hashes
from services.study.definition import Problem, Study, build_study, find_problems, thaw

log = logging.getLogger(__name__)

MAX_REASON = 2000
# roles whose accounts hold the study's data (a preview account's data breaks nothing)
DATA_ROLES = ("participant", "test")

_pinned: ContextVar[Study | None] = ContextVar("pinned_study", default=None)


def definition_hash(definition: Mapping[str, Any]) -> str:
    """A stable hash of a definition: the same definition gives the same hash in any process."""
    canonical = json.dumps(thaw(definition), sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def pinned_study() -> Study | None:
    """The study this request (or thread of work) was pinned to, if any."""
    return _pinned.get()


class BreakingChange(Conflict):
    """Publishing would change the meaning of data already collected."""


# ---------------------------------------------------------------------------
# The per-process cache of published versions
# ---------------------------------------------------------------------------


class StudyVersions:
    """The published versions one process serves: each built once, and the live one checked for change at most
    every ``refresh_seconds`` with one small query (the newest version number)."""

    def __init__(self, session_factory: Callable[[], Session], *, refresh_seconds: float,
                 on_change: Callable[[Study], None]) -> None:
        self._session_factory = session_factory
        self.refresh_seconds = refresh_seconds
        self._on_change = on_change
        self._built: dict[int, Study] = {}
        self._lock = threading.Lock()
        self._checked_at = float("-inf")
        self.live_version: int | None = None
        self.oldest_version: int | None = None
        self.enabled = True

    def start(self, file_study: Study, clock: Clock) -> Study:
        """Import the file's definition (when new) and make the live version current; returns it. Without the
        tables (a database not migrated yet) versioning is off and the file's study is served as before."""
        try:
            with self._session_factory() as session:
                import_file_study(session, file_study, clock)
        except (OperationalError, ProgrammingError) as exc:
            log.warning("study versions are off (the database has no study_versions table yet: %s)", exc.orig)
            self.enabled = False
            return file_study
        self.refresh(force=True)
        return self.current() or file_study

    def refresh(self, *, force: bool = False, session_factory: Callable[[], Session] | None = None) -> None:
        """Look up the newest version number (at most every ``refresh_seconds``) and switch to it.

        ``session_factory``: the caller's pool (a scheduler job passes the background pool's, so a sweep never
        waits on a request pool that requests have used up); default, the pool this object was made with."""
        if not self.enabled:
            return
        now = time.monotonic()
        if not force and now - self._checked_at < self.refresh_seconds:
            return
        with (session_factory or self._session_factory)() as session:
            oldest, newest = session.execute(select(func.min(StudyVersion.version),
                                                    func.max(StudyVersion.version))).one()
        self._checked_at = now
        if newest is not None and newest != self.live_version:
            study = self.study(newest, session_factory=session_factory)
            with self._lock:
                self.live_version = newest
                self.oldest_version = oldest
            self._on_change(study)

    @property
    def only_version(self) -> bool:
        """Whether one version was ever published: every task then runs under the live one (nothing to look up)."""
        return self.live_version is not None and self.live_version == self.oldest_version

    def current(self) -> Study | None:
        return self.study(self.live_version) if self.live_version is not None else None

    def study(self, version: int, *, session_factory: Callable[[], Session] | None = None) -> Study:
        """The published version ``version``, built (validated) once per process (read through
        ``session_factory``, default the pool this object was made with)."""
        with self._lock:
            cached = self._built.get(version)
        if cached is not None:
            return cached
        with (session_factory or self._session_factory)() as session:
            row = session.scalar(select(StudyVersion).where(StudyVersion.version == version))
        if row is None:
            raise NotFound(f"no published study version {version}", code="unknown_study_version")
        study = replace(build_study(row.definition), version=version)
        with self._lock:
            self._built[version] = study
        return study

    @contextmanager
    def pin(self, study: Study) -> Iterator[Study]:
        """Serve ``study`` to everything that reads ``Runtime.study`` in this context until the block ends."""
        token = _pinned.set(study)
        try:
            yield study
        finally:
            _pinned.reset(token)

    def pin_request(self, study: Study) -> Any:
        """``pin`` for a request: returns the token ``unpin`` takes at its teardown."""
        return _pinned.set(study)

    @staticmethod
    def unpin(token: Any) -> None:
        _pinned.reset(token)


# ---------------------------------------------------------------------------
# Versions and drafts
# ---------------------------------------------------------------------------


def import_file_study(session: Session, study: Study, clock: Clock) -> StudyVersion | None:
    """Store the definition given at start-up as the next version unless a version with its hash exists;
    returns the new row, or None. Two processes starting at once store it once (the unique version number)."""
    digest = definition_hash(study.definition)
    for _ in range(3):
        if session.scalar(select(StudyVersion.id).where(StudyVersion.study_hash == digest).limit(1)):
            return None
        row = StudyVersion(version=_next_version(session), study_hash=digest, definition=study.as_dict(),
                           source="file", created_at=clock.now())
        session.add(row)
        session.add(AuditLog(at=row.created_at, action="study_imported",
                             details={"version": row.version, "study_hash": digest,
                                      "recall_word_lists": word_list_hashes()}))
        try:
            session.commit()
            log.info("study definition %s imported as version %d", digest[:12], row.version)
            return row
        except IntegrityError:
            session.rollback()
    raise Conflict("the study definition could not be imported (versions kept changing)", code="study_busy")


def _next_version(session: Session) -> int:
    return (session.scalar(select(func.max(StudyVersion.version))) or 0) + 1


def live_row(session: Session) -> StudyVersion | None:
    return session.scalar(select(StudyVersion).order_by(StudyVersion.version.desc()).limit(1))


def parse_source(text: Any, fmt: Any) -> dict[str, Any]:
    """A definition from JSON or YAML text (the STUDY_CONFIG formats), or BadInput naming the problem."""
    if not isinstance(text, str):
        raise BadInput("source must be the definition's text", code="invalid_study_source")
    try:
        data = json.loads(text) if fmt == "json" else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as exc:
        raise BadInput(f"the {fmt or 'yaml'} text cannot be read: {exc}", code="invalid_study_source") from exc
    if not isinstance(data, dict):
        raise BadInput("the definition must be a mapping at the top level", code="invalid_study_source")
    return data


def check_definition(definition: Any, *, runnable: Callable[[Study], None] | None = None) -> list[Problem]:
    """Every problem of ``definition``: its validation (each unknown key by its path), then ``runnable`` (e.g.
    the memory registry's check that every condition has its prompt paragraph)."""
    if not isinstance(definition, Mapping):
        return [Problem("", "the definition must be a JSON object", "wrong_type")]
    problems = find_problems(definition)
    if not problems and runnable is not None:
        try:
            runnable(build_study(definition))
        except (ValueError, KeyError) as exc:
            problems.append(Problem("", str(exc).strip("'\""), "invalid"))
    return problems


def save_draft(session: Session, definition: Any, *, actor: User | None, clock: Clock,
               runnable: Callable[[Study], None] | None = None) -> tuple[StudyDraft | None, list[Problem]]:
    """A validated definition stored as a new draft (the caller commits), or the problems and no draft."""
    problems = check_definition(definition, runnable=runnable)
    if problems:
        return None, problems
    live = live_row(session)
    if live is not None:
        definition = conform_numbers(definition, live.definition)
    draft = StudyDraft(definition=thaw(definition), study_hash=definition_hash(definition),
                       based_on_version=live.version if live else None, created_at=clock.now(),
                       created_by=actor.id if actor else None)
    session.add(draft)
    session.flush()
    return draft, []


def conform_numbers(value: Any, reference: Any) -> Any:
    """``value`` with each whole number written as a float where ``reference`` has a float at that path: a
    browser sends 1.0 as 1, and an unchanged definition must keep its hash (the pre-flight keys on it)."""
    if isinstance(value, Mapping):
        ref = reference if isinstance(reference, Mapping) else {}
        return {k: conform_numbers(v, ref.get(k)) for k, v in value.items()}
    if isinstance(value, list | tuple):
        ref = list(reference) if isinstance(reference, list | tuple) else []
        return [conform_numbers(v, ref[i] if i < len(ref) else None) for i, v in enumerate(value)]
    if isinstance(value, int) and not isinstance(value, bool) and isinstance(reference, float):
        return float(value)
    return value


def publish(session: Session, draft_id: int, *, reason: Any, actor: User, clock: Clock,
            runnable: Callable[[Study], None] | None = None) -> StudyVersion:
    """Make a draft the live definition (the caller commits). Refused: an unknown or already published draft,
    a definition with problems, a change that would break collected data, and, once any participant exists,
    a missing reason."""
    draft = session.get(StudyDraft, draft_id)
    if draft is None:
        raise NotFound(f"no draft {draft_id}", code="unknown_draft")
    if draft.published_version is not None:
        raise Conflict(f"draft {draft_id} was published as version {draft.published_version}",
                       code="draft_already_published", details={"version": draft.published_version})
    problems = check_definition(draft.definition, runnable=runnable)
    if problems:
        raise BadInput("the draft has problems", code="invalid_definition",
                       details={"problems": [p.as_dict() for p in problems]})
    reason_text = reason.strip() if isinstance(reason, str) else ""
    if len(reason_text) > MAX_REASON:
        raise BadInput(f"the reason is longer than {MAX_REASON} characters", code="reason_too_long")
    has_participants = session.scalar(select(func.count(User.id)).where(User.role.in_(DATA_ROLES))) > 0
    if has_participants and not reason_text:
        raise BadInput("participants have taken part: publishing needs a reason (it goes into the audit log)",
                       code="reason_required")
    live = live_row(session)
    if live is not None:
        breaking = breaking_changes(session, live.definition, draft.definition)
        if breaking:
            raise BreakingChange("this change would break data already collected: " + "; ".join(
                p.message for p in breaking), code="breaking_change",
                details={"problems": [p.as_dict() for p in breaking]})
    now = clock.now()
    row = StudyVersion(version=_next_version(session), study_hash=draft.study_hash, definition=draft.definition,
                       source="editor", created_at=now, created_by=actor.id, reason=reason_text or None,
                       draft_id=draft.id)
    session.add(row)
    draft.published_version = row.version
    session.add(AuditLog(at=now, actor_user_id=actor.id, action="study_published",
                         details={"version": row.version, "study_hash": row.study_hash,
                                  "recall_word_lists": word_list_hashes(), "draft_id": draft.id,
                                  "previous_version": live.version if live else None,
                                  "reason": reason_text or None}))
    try:
        session.flush()
    except IntegrityError as exc:  # another publish took this version number at the same moment
        session.rollback()
        raise Conflict("another version was published at the same moment; reload and try again",
                       code="publish_conflict") from exc
    return row


def breaking_changes(session: Session, old: Mapping[str, Any], new: Mapping[str, Any]) -> list[Problem]:
    """What publishing ``new`` over ``old`` would break in the data collected so far."""
    problems: list[Problem] = []
    groups = dict(session.execute(
        select(Assignment.memory_group, func.count()).join(User, User.id == Assignment.user_id)
        .where(User.role.in_(DATA_ROLES)).group_by(Assignment.memory_group)).all())
    for group, count in sorted(groups.items()):
        if count and group not in new.get("enabled_conditions", []):
            problems.append(Problem("enabled_conditions", f"condition {group} has {count} participant(s) and "
                                    "cannot be removed", "breaking_change"))
        if count and group not in (new.get("conditions") or {}):
            problems.append(Problem(f"conditions.{group}", f"condition {group} has {count} participant(s) and "
                                    "cannot be removed", "breaking_change"))
    started = dict(session.execute(
        select(TaskSession.task_id, func.count()).join(User, User.id == TaskSession.user_id)
        .where(User.role.in_(DATA_ROLES)).group_by(TaskSession.task_id)).all())
    new_tasks = {t.get("id") for t in new.get("tasks") or [] if isinstance(t, Mapping)}
    for task_id, count in sorted(started.items()):
        if task_id not in new_tasks:
            problems.append(Problem("tasks", f"task {task_id} has {count} session(s) and cannot be removed or "
                                    "renamed", "breaking_change"))
    answered = set(session.execute(select(QuestionnaireResponse.instrument, QuestionnaireResponse.item_id)
                                   .distinct()).all())
    old_instruments = old.get("instruments") or {}
    new_instruments = new.get("instruments") or {}
    for instrument, item_id in sorted(answered):
        before = _item(old_instruments, instrument, item_id)
        if before is None:
            continue
        if instrument not in new_instruments:
            problems.append(Problem(f"instruments.{instrument}", f"instrument {instrument} has answers and cannot "
                                    "be removed", "breaking_change"))
            continue
        after = _item(new_instruments, instrument, item_id)
        if after is None:
            problems.append(Problem(f"instruments.{instrument}.items", f"item {item_id} of {instrument} has answers:"
                                    " its id cannot be changed or the item removed", "breaking_change"))
        elif _scale(before) != _scale(after):
            index = [i.get("id") for i in new_instruments[instrument].get("items", [])].index(item_id)
            problems.append(Problem(f"instruments.{instrument}.items[{index}]", f"item {item_id} of {instrument} "
                                    "has answers: its type and scale (min, max, options' values) cannot change",
                                    "breaking_change"))
    return _unique(problems)


def _unique(problems: list[Problem]) -> list[Problem]:
    seen: dict[tuple[str, str], Problem] = {}
    for p in problems:
        seen.setdefault((p.key, p.message), p)
    return list(seen.values())


def _item(instruments: Mapping[str, Any], instrument: str, item_id: str) -> Mapping[str, Any] | None:
    for item in (instruments.get(instrument) or {}).get("items", []):
        if item.get("id") == item_id:
            return item
    return None


def _scale(item: Mapping[str, Any]) -> tuple[Any, ...]:
    return (item.get("type", "likert"), item.get("min"), item.get("max"),
            tuple(o.get("value") for o in item.get("options") or []))


# ---------------------------------------------------------------------------
# Reading: the list, one version or draft, a diff
# ---------------------------------------------------------------------------


def version_view(row: StudyVersion, *, live: bool = False) -> dict[str, Any]:
    return {"kind": "version", "ref": f"v{row.version}", "version": row.version, "hash": row.study_hash,
            "source": row.source, "created_at": utc_iso(row.created_at), "created_by": row.created_by,
            "reason": row.reason, "draft_id": row.draft_id, "live": live}


def draft_view(row: StudyDraft) -> dict[str, Any]:
    return {"kind": "draft", "ref": f"d{row.id}", "draft_id": row.id, "hash": row.study_hash,
            "based_on_version": row.based_on_version, "created_at": utc_iso(row.created_at),
            "created_by": row.created_by, "published_version": row.published_version}


def listing(session: Session) -> dict[str, Any]:
    versions = session.scalars(select(StudyVersion).order_by(StudyVersion.version.desc())).all()
    drafts = session.scalars(select(StudyDraft).order_by(StudyDraft.id.desc())).all()
    live = versions[0].version if versions else None
    return {"live_version": live, "versions": [version_view(v, live=v.version == live) for v in versions],
            "drafts": [draft_view(d) for d in drafts]}


def definition_of(session: Session, ref: Any) -> tuple[str, dict[str, Any]]:
    """(ref, definition) of ``v<version>``, ``d<draft id>`` or ``live``."""
    text = str(ref or "live")
    if text == "live":
        row = live_row(session)
        if row is None:
            raise NotFound("no published study version yet", code="unknown_study_version")
        return f"v{row.version}", row.definition
    kind, _, number = text[:1], None, text[1:]
    if kind in ("v", "d") and number.isdigit() and len(number) < 10:
        if kind == "v":
            row = session.scalar(select(StudyVersion).where(StudyVersion.version == int(number)))
        else:
            row = session.get(StudyDraft, int(number))
        if row is not None:
            return text, row.definition
    raise NotFound(f"no study version or draft {text!r} (write v<version>, d<draft id> or live)",
                   code="unknown_study_version")


def diff(before: Any, after: Any, path: str = "") -> list[dict[str, Any]]:
    """The changes from ``before`` to ``after``: [{path, op (added | removed | changed), before, after}], with
    paths as the validation names keys (``tasks[0].title.en``)."""
    if isinstance(before, Mapping) and isinstance(after, Mapping):
        changes: list[dict[str, Any]] = []
        for key in list(before) + [k for k in after if k not in before]:
            sub = f"{path}.{key}" if path else str(key)
            if key not in after:
                changes.append({"path": sub, "op": "removed", "before": before[key], "after": None})
            elif key not in before:
                changes.append({"path": sub, "op": "added", "before": None, "after": after[key]})
            else:
                changes.extend(diff(before[key], after[key], sub))
        return changes
    if isinstance(before, list) and isinstance(after, list):
        changes = []
        for i in range(max(len(before), len(after))):
            sub = f"{path}[{i}]"
            if i >= len(after):
                changes.append({"path": sub, "op": "removed", "before": before[i], "after": None})
            elif i >= len(before):
                changes.append({"path": sub, "op": "added", "before": None, "after": after[i]})
            else:
                changes.extend(diff(before[i], after[i], sub))
        return changes
    numbers = all(isinstance(v, int | float) and not isinstance(v, bool) for v in (before, after))
    if before == after and (type(before) is type(after) or numbers):
        return []
    return [{"path": path, "op": "changed", "before": before, "after": after}]


def render(definition: Mapping[str, Any], fmt: str) -> str:
    """The definition as a STUDY_CONFIG file: JSON or YAML."""
    if fmt == "yaml":
        return yaml.safe_dump(thaw(definition), allow_unicode=True, sort_keys=False, width=120)
    return json.dumps(thaw(definition), ensure_ascii=False, indent=2) + "\n"
