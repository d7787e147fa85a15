"""The stored pre-flight reports, read: the study-definition hash they are keyed by, the latest report, its view,
and the export manifest's ``preflight`` entry. Running a pre-flight is ``services.research.preflight``; the
export and the report only read what it stored, so they live here, below ``research``."""
from __future__ import annotations

import hashlib
import json
from dataclasses import fields
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from database.models import PreflightReport
from services.platform.clock import utc_iso
from services.study import evidence
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
    """The export manifest's ``preflight``: the state for the exported study definition, the latest report, and
    that report as lines (``report_lines``: each check's verdict, each target's figure, interval, n and verdict)."""
    found, report = state(session, study)
    view = report_view(report)
    return {"state": found, "study_hash": study_hash(study), "report": view,
            "lines": report_lines(view) if view else []}


# What each check is called for people (the banner translates these names: admin.preflight.check.<name>).
CHECK_LABELS = {"calibration": "recall calibration", "manipulation": "bot manipulation check",
                "probe": "probe recall check"}


def check_label(name: str) -> str:
    return CHECK_LABELS.get(name, name.replace("_", " "))


# -- the report as lines (CLI and export) ------------------------------------------------------------------


def _verdict_of(target: dict[str, Any]) -> evidence.Verdict:
    return evidence.Verdict(**{f.name: target.get(f.name) for f in fields(evidence.Verdict)})


def _target_line(target: dict[str, Any]) -> str:
    if target.get("low") is None and target.get("estimate") is not None:  # no interval stored: figure and verdict
        return (f"{target['name']}: {target['estimate']:.1%} ({target['successes']}/{target['n']}; target "
                f"{'≥' if target['direction'] == 'at_least' else '≤'} {target['target']:.0%}) — "
                f"{target['verdict'].replace('_', ' ')}")
    return evidence.describe(_verdict_of(target))


def check_lines(name: str, check: dict[str, Any]) -> list[str]:
    """One check as lines: its name and verdict, then each target (figure, interval, n, verdict), each shape
    difference, what failed and the next step. Reads checks stored before the rule too (figures / failures)."""
    amber = " (amber: a target within error)" if check.get("amber") and check.get("passed") else ""
    lines = [f"{check_label(name)}: {check.get('verdict', 'passed' if check.get('passed') else 'failed')}{amber}"]
    if check.get("message"):
        lines.append(f"  {check['message']}")
    if check.get("reason"):
        lines.append(f"  {check['reason']}")
    lines += [f"  {_target_line(t)}" for t in check.get("targets") or []]
    lines += [f"  {evidence.describe_difference(d)}" for d in check.get("shape") or []]
    for group in check.get("groups") or []:  # information only: the rule does not decide on these
        off = [t for t in group["targets"] if t["verdict"] != "met"]
        lines.append(f"  (for information) {group['language']} {group['group']} alone: "
                     + ("every target met" if not off else "; ".join(_target_line(t) for t in off)))
    if not check.get("targets"):  # a report stored before the rule
        for language, splits in (check.get("figures") or {}).items():
            for split, figures in splits.items():
                lines.append(f"  {language} {split}: " + ", ".join(f"{k} {v}" for k, v in figures.items()))
        lines += [f"  {failure}" for failure in check.get("failures") or []]
    for language, result in (check.get("by_language") or {}).items():
        beyond = "; ".join(f"{c['group']} beyond {c['baseline']} "
                           + " / ".join(f"{t} {share:.0%}" for t, share in c["shares"].items())
                           for c in result["beyond"])
        lines.append(f"  {language}: {result['bots']} bots; {beyond or '-'}: {'PASS' if result['passed'] else 'FAIL'}")
    lines += [f"  FAILED: {failed}" for failed in check.get("failed_checks") or []]
    if check.get("next_step") and not check.get("passed"):
        lines.append(f"  next step: {check['next_step']['text']}")
    return lines


def report_lines(report: dict[str, Any]) -> list[str]:
    """A stored report (``report_view``) as lines: the verdict, the models, and each check (``check_lines``)."""
    lines = [f"pre-flight {'PASSED' if report['passed'] else 'FAILED'} for study definition "
             f"{report['study_hash'][:12]} at {report['created_at']} (report {report['id']}); "
             f"embedder {report['embedder_model']}, replies {report['chat_model']}"]
    failed = [check_label(name) for name, check in report["checks"].items() if not check.get("passed")]
    if failed:
        lines.append("failed: " + ", ".join(failed))
    for index, (name, check) in enumerate(report["checks"].items()):
        first, *rest = check_lines(name, check)
        lines += [f"  ({chr(ord('a') + index)}) {first}"] + [f"    {line}" for line in rest]
    return lines
