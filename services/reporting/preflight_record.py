"""The stored pre-flight reports, read: the study-definition hash they are keyed by, the latest report, its view,
and the export manifest's ``preflight`` entry. Running a pre-flight is ``services.research.preflight``; the
export and the report only read what it stored, so they live here, below ``research``."""
from __future__ import annotations

import hashlib
import json
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from database.models import PreflightReport
from services.platform.clock import utc_iso
from services.study.definition import Study


def study_hash(study: Study) -> str:
    """A stable hash of the frozen study definition: the same definition gives the same hash in any process."""
    canonical = json.dumps(study.as_dict(), sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


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


def manifest_entry(session: Session, study: Study) -> dict[str, Any]:
    """The export manifest's ``preflight``: the state for the exported study definition and the latest report."""
    found, report = state(session, study)
    return {"state": found, "study_hash": study_hash(study), "report": report_view(report)}
