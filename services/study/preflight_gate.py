"""Whether the study is open: the pre-flight's gate, decided from the stored reports (``REQUIRE_PREFLIGHT``).

Registration and panel entry ask ``require_open`` (503 ``study_not_open`` until the latest pre-flight report for
the current study definition passed); the admin console shows ``preflight_status``. The reports are keyed by
``study_hash``. Running a pre-flight is offline tooling (``services.research.preflight``); the export's manifest
and the report read the same records (``services.reporting.preflight_record``).
"""
from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from database.models import PreflightReport
from services.platform.clock import utc_iso
from services.platform.errors import Unavailable
from services.recall import parameters as recall_parameters
from services.study.definition import Study
from services.study.settings import Settings
from services.study.versions import definition_hash


def study_hash(study: Study) -> str:
    """A stable hash of the frozen study definition: the same definition gives the same hash in any process."""
    return definition_hash(study.definition)


def latest_report(session: Session, for_hash: str | None = None) -> PreflightReport | None:
    query = select(PreflightReport)
    if for_hash is not None:
        query = query.where(PreflightReport.study_hash == for_hash)
    return session.scalar(query.order_by(PreflightReport.created_at.desc(), PreflightReport.id.desc()).limit(1))


def report_view(report: PreflightReport | None) -> dict[str, Any] | None:
    if report is None:
        return None
    return {"id": report.id, "created_at": utc_iso(report.created_at), "study_hash": report.study_hash,
            "passed": report.passed, "embedder_model": report.embedder_model, "chat_model": report.chat_model,
            "providers": report.providers, "checks": report.checks, "duration_seconds": report.duration_seconds}


def state(session: Session, study: Study) -> tuple[str, PreflightReport | None]:
    """``verified`` / ``failed`` (the latest report for this definition passed / failed), ``changed`` (reports
    exist, none for this definition) or ``not_verified``; with the report it refers to."""
    current = study_hash(study)
    here = latest_report(session, current)
    if here is not None:
        return ("verified" if here.passed else "failed"), here
    report = latest_report(session)
    return ("changed" if report is not None else "not_verified"), report


def embedder_warning(study: Study, embedder_model: str) -> str | None:
    """Why ``r`` means nothing with this embedder, or None when the active preset was fitted for it."""
    return recall_parameters.embedder_warning(study.memory.recall, embedder_model)


def preflight_status(session: Session, settings: Settings, embedder_model: str) -> dict[str, Any]:
    """What the admin console shows at the top: ``state`` is ``verified`` (the latest report for this study
    definition passed), ``failed`` (it failed), ``changed`` (reports exist, none for this definition) or
    ``not_verified`` (no report at all); with the report it refers to and any embedder mismatch."""
    found, report = state(session, settings.study)
    return {"state": found, "study_hash": study_hash(settings.study), "study_version": settings.study.version,
            "required": settings.require_preflight, "report": report_view(report), "embedder_model": embedder_model,
            "embedder_warning": embedder_warning(settings.study, embedder_model)}


def is_open(session: Session, settings: Settings) -> bool:
    """Whether participants may come in: always without REQUIRE_PREFLIGHT, else once the latest pre-flight
    report for the current study definition passed."""
    if not settings.require_preflight:
        return True
    report = latest_report(session, study_hash(settings.study))
    return report is not None and report.passed


def require_open(session: Session, settings: Settings) -> None:
    """New enrolment (registration, a new panel id): 503 ``study_not_open`` until ``is_open``. Participants
    already taking part are never stopped by it (logins and returning panel entries do not call this)."""
    if not is_open(session, settings):
        raise Unavailable("the study is not open yet to new participants: the manipulation has not been verified "
                          "for this study definition (flask --app app preflight); participants already taking "
                          "part continue as usual", code="study_not_open")
