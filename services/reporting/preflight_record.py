"""The stored pre-flight reports, read for the export's manifest and the report: the manifest's ``preflight`` entry
and each report as lines. Running a pre-flight is ``services.research.preflight``; the export and the report only
read what it stored, so they live here, below ``research``. The records themselves (the study-definition hash they
are keyed by, the latest report, its view and state) are read by the gate, ``services.study.preflight_gate``."""
from __future__ import annotations

from dataclasses import fields
from typing import Any

from sqlalchemy.orm import Session

from services.study import evidence
from services.study.definition import Study
from services.study.preflight_gate import report_view, state, study_hash


def manifest_entry(session: Session, study: Study) -> dict[str, Any]:
    """The export manifest's ``preflight``: the state for the exported study definition, the latest report, and
    that report as lines (``report_lines``: each check's verdict, each target's figure, interval, n and verdict)."""
    found, report = state(session, study)
    view = report_view(report)
    return {"state": found, "study_hash": study_hash(study), "study_version": study.version, "report": view,
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
